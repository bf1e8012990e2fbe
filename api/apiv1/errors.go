package apiv1

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Error codes and the HTTP status each is sent with.
const (
	CodeUnauthenticated = "unauthenticated"   // 401
	CodeNotFound        = "not_found"         // 404, also for another tenant's namespace
	CodeAlreadyExists   = "already_exists"    // 409
	CodeConflict        = "conflict"          // 409, e.g. a namespace that still has functions
	CodeInvalidArgument = "invalid_argument"  // 400
	CodeInvalidArchive  = "invalid_archive"   // 400
	CodePayloadTooLarge = "payload_too_large" // 413
	CodeNotReady        = "not_ready"         // 503
	CodeUpstreamError   = "upstream_error"    // 502
	CodeUpstreamTimeout = "upstream_timeout"  // 504
	CodeInternal        = "internal"          // 500
	// CodeThrottled: too many requests of this kind for now; Retry-After says when to try again.
	CodeThrottled = "throttled" // 429
	// CodeQuotaExceeded: the namespace holds as much of something as its quota allows (e.g.
	// functions); the message names the quota. Not 429: retrying changes nothing until something
	// is deleted or the quota raised.
	CodeQuotaExceeded = "quota_exceeded" // 403
)

// StatusOf maps an error code to its HTTP status.
func StatusOf(code string) int {
	switch code {
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAlreadyExists, CodeConflict:
		return http.StatusConflict
	case CodeInvalidArgument, CodeInvalidArchive:
		return http.StatusBadRequest
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeNotReady:
		return http.StatusServiceUnavailable
	case CodeUpstreamError:
		return http.StatusBadGateway
	case CodeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case CodeThrottled:
		return http.StatusTooManyRequests
	case CodeQuotaExceeded:
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the one error envelope: {"error":{"code":"…","message":"…"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong and how to fix it.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error is an API error as a Go error, on both sides of the wire. Status is the HTTP status.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the answer's Retry-After (a client reads it; 0 when none).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s): %s", e.Code, e.Status, http.StatusText(e.Status), e.Message)
}

// Errorf makes an *Error with the status of code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Status: StatusOf(code), Code: code, Message: fmt.Sprintf(format, args...)}
}

// Write sends e as the one error envelope, with its status and, when e says when to come back,
// Retry-After in whole seconds (at least 1). Every server of the wire format writes errors through
// it.
func (e *Error) Write(w http.ResponseWriter) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(e.RetryAfter.Seconds())))))
	}
	WriteJSON(w, e.Status, ErrorBody{Error: ErrorDetail{Code: e.Code, Message: e.Message}})
}

// WriteJSON sends v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
