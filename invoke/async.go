package invoke

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// maxAsyncHeaderBytes bounds the headers stored with an asynchronous request.
const maxAsyncHeaderBytes = 32 << 10

// WithAsync takes asynchronous invocations (X-Sless-Invocation-Type: Event) of functions that
// enable them into the backend's queue (objects.Backend.Async): wake is told of each (the
// dispatcher in this process), statusURL makes the answer's status_url.
func WithAsync(wake func(), statusURL func(ns, name, id string) string) Option {
	return func(o *options) { o.asyncWake, o.asyncStatusURL = wake, statusURL }
}

// asyncRequested reads X-Sless-Invocation-Type: true for Event, false for none or RequestResponse.
func asyncRequested(r *http.Request) (bool, *apiv1.Error) {
	v := r.Header.Get(apiv1.HeaderInvocationType)
	switch {
	case v == "", strings.EqualFold(v, "RequestResponse"):
		return false, nil
	case strings.EqualFold(v, apiv1.InvocationTypeEvent):
		return true, nil
	}
	return false, apiv1.Errorf(apiv1.CodeInvalidArgument, "%s %q: use %s (asynchronous) or RequestResponse (the default)",
		apiv1.HeaderInvocationType, v, apiv1.InvocationTypeEvent)
}

// enqueue stores r for function fn and answers 202 {id, status_url}. rest is the path below the
// function, escaped.
func (p *Proxy) enqueue(w http.ResponseWriter, r *http.Request, ns, name, rest string, fn objects.Function) {
	if fn.Spec.Async == nil || !fn.Spec.Async.Enabled || p.async == nil {
		writeError(w, apiv1.Errorf(apiv1.CodeInvalidArgument, "function %q does not take asynchronous invocations (%s: %s); its owner can set async.enabled",
			name, apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent))
		return
	}
	cfg := fn.Spec.Async.WithDefaults()
	// Stored until delivered, and then sent through /fn/: the smaller of the two bounds.
	limit := min(p.o.bodyLimit, apiv1.MaxAsyncBodyBytes)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, apiv1.Errorf(apiv1.CodePayloadTooLarge, "an asynchronous request's body is stored until delivered: at most %d bytes", limit))
			return
		}
		w.WriteHeader(499) // the client went away mid-body
		return
	}
	header := storedHeader(r.Header)
	size := 0
	for k, vs := range header {
		for _, v := range vs {
			size += len(k) + len(v) + 4
		}
	}
	if size > maxAsyncHeaderBytes {
		writeError(w, apiv1.Errorf(apiv1.CodePayloadTooLarge, "an asynchronous request's headers are stored until delivered: at most %d bytes", maxAsyncHeaderBytes))
		return
	}
	path := rest
	if path == "/" {
		path = ""
	}
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	now := time.Now().UTC()
	var random [10]byte
	rand.Read(random[:])
	ev := objects.AsyncEvent{
		ID: apiv1.FormatAsyncID(now, random), Namespace: ns, Function: name, State: apiv1.AsyncQueued,
		Created: now, Enqueued: now, NextAttempt: now,
		Request: objects.AsyncRequest{Method: r.Method, Path: path, Header: header, Body: body},
	}
	if err := p.async.Enqueue(r.Context(), ev, cfg.MaxQueued); err != nil {
		if errors.Is(err, objects.ErrQueueFull) {
			w.Header().Set("Retry-After", "5")
			writeError(w, apiv1.Errorf(apiv1.CodeThrottled, "function %q has %d asynchronous invocations waiting, its async.max_queued", name, cfg.MaxQueued))
			return
		}
		fail(w, name, err)
		return
	}
	p.m.asyncAccepted.Inc()
	if p.o.asyncWake != nil {
		p.o.asyncWake()
	}
	out := apiv1.AsyncAccepted{ID: ev.ID}
	if p.o.asyncStatusURL != nil {
		out.StatusURL = p.o.asyncStatusURL(ns, name, ev.ID)
		w.Header().Set("Location", out.StatusURL)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(out)
}

// storedHeader is what of a request's header is sent on with it later: not what concerned this
// hop (hop-by-hop headers, the length, the invocation type).
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Expect", apiv1.HeaderInvocationType} {
		delete(out, k)
	}
	for _, f := range h["Connection"] {
		for _, k := range strings.Split(f, ",") {
			delete(out, http.CanonicalHeaderKey(strings.TrimSpace(k)))
		}
	}
	return out
}
