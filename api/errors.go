package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/objects"
)

// unavailableRetry is the Retry-After of a 503 for a store that does not answer.
const unavailableRetry = 5 * time.Second

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) { apiv1.WriteJSON(w, status, v) }

// toAPIError maps any error to the envelope's code and status. Errors users did not cause become
// "internal" with a generic message (the details go to the log).
func toAPIError(err error) *apiv1.Error {
	var ae *apiv1.Error
	var nr *objects.NotReadyError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &nr):
		return apiv1.Errorf(apiv1.CodeNotReady, "%s", nr.Reason)
	case errors.Is(err, codestore.ErrUnavailable):
		// Not the caller's fault and not a bug: a service behind the API is down. What it said
		// (endpoints, bucket) goes to the log only.
		return &apiv1.Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeNotReady,
			Message: "the code store is unavailable; retry later", RetryAfter: unavailableRetry}
	case errors.As(err, &mb):
		return apiv1.Errorf(apiv1.CodePayloadTooLarge, "the body exceeds the limit of %d bytes", mb.Limit)
	case errors.Is(err, objects.ErrNotFound):
		return apiv1.Errorf(apiv1.CodeNotFound, "%v", err)
	case errors.Is(err, objects.ErrAlreadyExists):
		return apiv1.Errorf(apiv1.CodeAlreadyExists, "%v", err)
	case errors.Is(err, objects.ErrConflict):
		return apiv1.Errorf(apiv1.CodeConflict, "%v", err)
	case errors.Is(err, objects.ErrQuotaExceeded):
		return apiv1.Errorf(apiv1.CodeQuotaExceeded, "%v", err)
	case errors.Is(err, layers.ErrTooLarge):
		return apiv1.Errorf(apiv1.CodePayloadTooLarge, "%v", err)
	case errors.Is(err, layers.ErrInvalidArchive), errors.Is(err, layers.ErrUnsafePath),
		errors.Is(err, layers.ErrUnsupportedType), errors.Is(err, layers.ErrDuplicate),
		errors.Is(err, layers.ErrTooManyEntries), errors.Is(err, layers.ErrCompressionRatio),
		errors.Is(err, layers.ErrNotExecutable):
		return apiv1.Errorf(apiv1.CodeInvalidArchive, "%v", err)
	}
	return &apiv1.Error{Status: http.StatusInternalServerError, Code: apiv1.CodeInternal, Message: "internal error; see the server log"}
}

// writeError is the one place errors are written: the envelope {"error":{"code","message"}}, and
// Retry-After when the error says when to come back.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := toAPIError(err)
	if ae.Code == apiv1.CodeInternal || errors.Is(err, codestore.ErrUnavailable) {
		logCause(w, err)
	}
	ae.Write(w)
}

// logCause puts err into this request's log line (observe), through the server's logger: the
// details an answer does not show.
func logCause(w http.ResponseWriter, err error) {
	if rec, ok := w.(*recorder); ok {
		rec.SetCause(err)
	}
}
