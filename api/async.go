package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/objects"
)

// WithDeliveryMetrics counts the asynchronous invocations' deliveries on m
// (sless_deliveries_total, source "async"), which the caller registers: a backend whose own event
// sources count on the same series. The default makes and registers its own.
func WithDeliveryMetrics(m *delivery.Metrics) Option { return func(o *options) { o.deliveries = m } }

// RunAsync delivers the asynchronous invocations /fn/ accepted (async.Dispatcher, through Events)
// until ctx ends; every replica of the API runs it (the queue hands each event to one). Without a
// queue (objects.Backend.Async) it only waits for ctx.
func (s *Server) RunAsync(ctx context.Context) error {
	if s.dispatcher == nil {
		<-ctx.Done()
		return nil
	}
	return s.dispatcher.Run(ctx)
}

// newDispatcher is the dispatcher of backend b's queue, nil without one.
func (s *Server) newDispatcher() *async.Dispatcher {
	if s.b.Async == nil {
		return nil
	}
	s.metrics.reg.MustRegister(async.NewCollector(s.b.Async))
	// Each delivery reads its function's async settings: from /fn/'s serving view when the backend
	// has one (Kubernetes: the informer cache, not an API server round trip per event).
	var fns async.FunctionGetter = s.b.Functions
	if s.b.Serving != nil {
		fns = s.b.Serving.Functions
	}
	return &async.Dispatcher{Queue: s.b.Async, Functions: fns, Handler: s.eventFn, Events: s.warnings, Metrics: s.deliveries, Logger: s.o.logger}
}

// wakeAsync tells the dispatcher of a new or redriven event.
func (s *Server) wakeAsync() {
	if s.dispatcher != nil {
		s.dispatcher.Wake()
	}
}

// asyncStatusURL is GET …/functions/{name}/async/{id} under the public URL.
func (s *Server) asyncStatusURL(ns, name, id string) string {
	return s.o.publicURL + "/v1/namespaces/" + url.PathEscape(ns) + "/functions/" + url.PathEscape(name) + "/async/" + id
}

// asyncFunction checks the path of an async route: a function of the namespace (404 otherwise),
// on an install that keeps asynchronous invocations.
func (s *Server) asyncFunction(w http.ResponseWriter, r *http.Request) (objects.Function, bool) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return objects.Function{}, false
	}
	fn, err := s.b.Functions.Get(r.Context(), ns, name)
	if err != nil {
		writeError(w, r, notFound("function", name, err))
		return objects.Function{}, false
	}
	if s.b.Async == nil {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotFound, "this installation keeps no asynchronous invocations"))
		return objects.Function{}, false
	}
	return fn, true
}

func asyncNotFound(id string, err error) error {
	if errors.Is(err, objects.ErrNotFound) {
		return apiv1.Errorf(apiv1.CodeNotFound, "asynchronous invocation %q not found", id)
	}
	return err
}

// getAsync answers GET …/functions/{name}/async/{id}.
func (s *Server) getAsync(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.asyncFunction(w, r); !ok {
		return
	}
	id := pathVar(r, "id")
	if err := apiv1.ValidAsyncID(id); err != nil {
		writeError(w, r, err)
		return
	}
	ev, err := s.b.Async.Get(r.Context(), pathVar(r, "ns"), pathVar(r, "name"), id)
	if err != nil {
		writeError(w, r, asyncNotFound(id, err))
		return
	}
	writeJSON(w, http.StatusOK, ev.Wire())
}

// Bounds of GET …/dead-letters?limit=.
const (
	DefaultDeadLetterLimit = 100
	MaxDeadLetterLimit     = 1000
)

// deadLetters answers GET …/functions/{name}/dead-letters, newest first.
func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.asyncFunction(w, r); !ok {
		return
	}
	limit := DefaultDeadLetterLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxDeadLetterLimit {
			writeError(w, r, invalid("limit %q must be between 1 and %d", v, MaxDeadLetterLimit))
			return
		}
		limit = n
	}
	evs, err := s.b.Async.DeadLetters(r.Context(), pathVar(r, "ns"), pathVar(r, "name"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]apiv1.AsyncInvocation, 0, len(evs))
	for _, ev := range evs {
		items = append(items, ev.Wire())
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.AsyncInvocation]{Items: items})
}

// redrive answers POST …/functions/{name}/dead-letters/{id}/redrive: the dead letter is queued
// again, its retries and max_age_sec counted from now.
func (s *Server) redrive(w http.ResponseWriter, r *http.Request) {
	fn, ok := s.asyncFunction(w, r)
	if !ok {
		return
	}
	id := pathVar(r, "id")
	if err := apiv1.ValidAsyncID(id); err != nil {
		writeError(w, r, err)
		return
	}
	cfg := apiv1.AsyncConfig{}
	if fn.Spec.Async != nil {
		cfg = *fn.Spec.Async
	}
	cfg = cfg.WithDefaults()
	ev, err := s.b.Async.Redrive(r.Context(), pathVar(r, "ns"), pathVar(r, "name"), id, time.Now().UTC(), cfg.MaxQueued)
	switch {
	case errors.Is(err, objects.ErrQueueFull):
		err = &apiv1.Error{Status: http.StatusTooManyRequests, Code: apiv1.CodeThrottled, RetryAfter: 5 * time.Second,
			Message: "the function's asynchronous queue is full (async.max_queued " + strconv.Itoa(cfg.MaxQueued) + "); redrive later"}
	case errors.Is(err, objects.ErrConflict):
		err = apiv1.Errorf(apiv1.CodeConflict, "asynchronous invocation %q is not dead-lettered", id)
	}
	if err != nil {
		writeError(w, r, asyncNotFound(id, err))
		return
	}
	s.wakeAsync()
	writeJSON(w, http.StatusOK, ev.Wire())
}
