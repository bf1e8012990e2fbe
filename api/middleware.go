package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/invoke"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	callerKey
)

// WithRequestID returns ctx carrying a request ID.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey, id)
}

// RequestIDFrom is the request's ID ("" outside a request).
func RequestIDFrom(ctx context.Context) string { id, _ := ctx.Value(requestIDKey).(string); return id }

// CallerFrom is the verified caller of a /v1 request.
func CallerFrom(ctx context.Context) (auth.Caller, bool) {
	c, ok := ctx.Value(callerKey).(auth.Caller)
	return c, ok
}

// requestID keeps a well-formed X-Request-Id from the client or makes one (invoke.RequestID), and
// echoes it.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := invoke.RequestID(r)
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(WithRequestID(r.Context(), id)))
	})
}

func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// recorder remembers the status and size of a response; Unwrap lets http.ResponseController (and
// so the proxy's flushes) reach the real writer.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	err    error
}

// Status is the answer's status so far (0 before any); /fn/ records it.
func (rec *recorder) Status() int { return rec.status }

// SetCause puts err into the request's log line: the details an answer does not show.
func (rec *recorder) SetCause(err error) { rec.err = err }

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	n, err := rec.ResponseWriter.Write(b)
	rec.bytes += int64(n)
	return n, err
}

func (rec *recorder) Flush() { http.NewResponseController(rec.ResponseWriter).Flush() }

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// fnRoute is /fn/'s route label.
const fnRoute = "/fn/{ns}/{name}"

// observe logs one JSON line per request and feeds the request metrics, by route template (route,
// or the router's template of the request's route when "").
func (s *Server) observe(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		// A response cut off mid-body (a streamed answer whose function failed, timed out or went:
		// the proxy panics with http.ErrAbortHandler) is logged and counted too, as aborted.
		aborted := false
		defer func() {
			if aborted {
				panic(http.ErrAbortHandler)
			}
		}()
		func() {
			defer func() {
				if v := recover(); v != nil {
					if v != http.ErrAbortHandler {
						panic(v)
					}
					aborted = true
				}
			}()
			next.ServeHTTP(rec, r)
		}()
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		route := route
		if route == "" {
			route = "unmatched"
			if cr := mux.CurrentRoute(r); cr != nil {
				if t, err := cr.GetPathTemplate(); err == nil {
					route = t
				}
			}
		}
		d := time.Since(start)
		s.metrics.requests.WithLabelValues(route, methodLabel(r.Method), invoke.CodeLabel(rec.status)).Inc()
		s.metrics.latency.WithLabelValues(route).Observe(d.Seconds())
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.EscapedPath()),
			slog.Int("status", rec.status), slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.Int64("bytes", rec.bytes), slog.String("request_id", RequestIDFrom(r.Context())),
		}
		if rec.err != nil {
			attrs = append(attrs, slog.String("error", rec.err.Error()))
		}
		if aborted {
			attrs = append(attrs, slog.Bool("aborted", true))
		}
		s.o.logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

// knownMethods are the method label's values; every other method is "other". /fn/ is public and a
// method is any token a client sends: as a label it would grow /metrics without bound.
var knownMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true, http.MethodConnect: true, http.MethodTrace: true}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "other"
}

// authenticate verifies the bearer token and that {ns} is the caller's own namespace. Another
// tenant's namespace answers 404, exactly like one that does not exist.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return s.verify(true, next)
}

// authenticateAny verifies the bearer token of a route that names no namespace (GET
// /v1/runtimes): any valid token may read it.
func (s *Server) authenticateAny(next http.Handler) http.Handler {
	return s.verify(false, next)
}

// verify checks the bearer token, and with namespaced that {ns} is the caller's namespace.
func (s *Server) verify(namespaced bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		// A refused request's body is not read (a slow one would hold the connection up to the
		// upload read timeout): the answer goes out at once and the connection closes.
		refuse := func(err error) {
			w.Header().Set("Connection", "close")
			writeError(w, r, err)
		}
		if !ok || token == "" {
			refuse(apiv1.Errorf(apiv1.CodeUnauthenticated, "send a bearer token: Authorization: Bearer <JWT>"))
			return
		}
		caller, err := s.o.verifier.Verify(token)
		if err != nil {
			refuse(apiv1.Errorf(apiv1.CodeUnauthenticated, "%v", err))
			return
		}
		if ns := mux.Vars(r)["ns"]; namespaced && ns != caller.Namespace {
			refuse(apiv1.Errorf(apiv1.CodeNotFound, "namespace %q not found", ns))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey, caller)))
	})
}
