package apiv1

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// HeaderEventToken carries an event source's credential to /fn/ from outside the API's process
// (a Kubernetes namespace's rabbitmq consumer): with a valid token for the namespace in the
// request's path, /fn/ keeps the request's X-Sless-Event-* headers and records its source, as for
// an in-process event source. /fn/ strips it before the function sees the request, valid or not.
const HeaderEventToken = HeaderEventPrefix + "Token"

// eventTokenLabel separates these tokens from any other use of the same key.
const eventTokenLabel = "sless event source\x00"

// EventToken is namespace ns's event credential under the install's key: hex(HMAC-SHA256(key,
// label+ns)). It is good for ns's functions only, so a consumer's stolen token forges no event for
// another namespace.
func EventToken(key []byte, ns string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(eventTokenLabel + ns))
	return hex.EncodeToString(m.Sum(nil))
}

// ValidEventToken reports whether token is ns's under key, in constant time. An empty key trusts
// no token.
func ValidEventToken(key []byte, ns, token string) bool {
	if len(key) == 0 || ns == "" || token == "" {
		return false
	}
	return hmac.Equal([]byte(EventToken(key, ns)), []byte(token))
}
