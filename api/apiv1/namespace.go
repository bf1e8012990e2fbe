package apiv1

import (
	"crypto/sha256"
	"encoding/hex"
)

// NamespaceFor is the namespace of the user with JWT subject sub: "sless-" + the first 16 hex
// digits of sha256(sub). The seed system's rule, so existing users keep their namespace.
func NamespaceFor(sub string) string {
	sum := sha256.Sum256([]byte(sub))
	return "sless-" + hex.EncodeToString(sum[:])[:16]
}
