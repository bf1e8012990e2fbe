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

// DeliveryReport is what an event source outside the API's process (a Kubernetes namespace's
// rabbitmq consumer) reports of one trigger's deliveries since its last report, to POST
// /events/{ns}/deliveries with its namespace's HeaderEventToken: the API counts them on
// sless_deliveries_total and records each dead letter as a DeadLettered event on the trigger's
// function.
type DeliveryReport struct {
	Trigger      string `json:"trigger"`
	Acked        int64  `json:"acked"`
	Retried      int64  `json:"retried"`
	DeadLettered int64  `json:"dead_lettered"`
	// DeadLetters name some of them (at most MaxReportedDeadLetters; the rest are counted only).
	DeadLetters []ReportedDeadLetter `json:"dead_letters,omitempty"`
}

// ReportedDeadLetter is one message given up.
type ReportedDeadLetter struct {
	MessageID string `json:"message_id,omitempty"`
	Queue     string `json:"queue"`
	Reason    string `json:"reason"`
}

// Bounds of a DeliveryReport.
const (
	MaxReportedDeadLetters = 100
	MaxReportedCount       = 1_000_000
)
