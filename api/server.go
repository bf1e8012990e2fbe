package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/invoke"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// Defaults of the options below.
const (
	DefaultUploadLimit    = 50 << 20
	DefaultProxyBodyLimit = invoke.DefaultBodyLimit
	DefaultTokenTTL       = 365 * 24 * time.Hour
)

// Option configures New.
type Option func(*options)

type options struct {
	verifier    *auth.Verifier
	uploadLimit int64
	logger      *slog.Logger
	publicURL   string
	tempDir     string
	ready       func(context.Context) error
	fnDomain    string
	uploadRate  float64
	uploadBurst int
	runtimes    apiv1.RuntimePolicy
	deliveries  *delivery.Metrics
	eventKey    []byte
	// invoke configures /fn/ (package invoke).
	invoke []invoke.Option
}

// WithVerifier sets how bearer tokens are verified. Required.
func WithVerifier(v *auth.Verifier) Option { return func(o *options) { o.verifier = v } }

// WithUploadLimit bounds an uploaded archive. The default is 50 MiB.
func WithUploadLimit(n int64) Option { return func(o *options) { o.uploadLimit = n } }

// WithProxyBodyLimit bounds a request body sent through /fn/. The default is 6 MiB.
func WithProxyBodyLimit(n int64) Option {
	return func(o *options) { o.invoke = append(o.invoke, invoke.WithBodyLimit(n)) }
}

// WithLogger sets the request log. The default is none: the API is silent unless given a logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithPublicURL is the base of the URLs reported to users (status.url). The default is
// "http://127.0.0.1:8080".
func WithPublicURL(u string) Option {
	return func(o *options) { o.publicURL = strings.TrimRight(u, "/") }
}

// WithTempDir is where uploads are spooled while checked. The default is os.TempDir().
func WithTempDir(d string) Option { return func(o *options) { o.tempDir = d } }

// WithReadiness makes /readyz report 503 while check fails. The default is always ready.
func WithReadiness(check func(context.Context) error) Option {
	return func(o *options) { o.ready = check }
}

// WithProxyTransport sets the transport to functions. The default keeps 64 idle connections per
// function and dials with a 5-second timeout.
func WithProxyTransport(t http.RoundTripper) Option {
	return func(o *options) { o.invoke = append(o.invoke, invoke.WithTransport(t)) }
}

// WithProxyDialRetry is how long /fn/ keeps retrying a function it cannot connect to (nothing was
// sent, so any request may be retried), resolving it again each time: an instance just reported
// ready that is not reachable yet, or one a rollout replaced. The default is 3 seconds; 0 disables
// it.
func WithProxyDialRetry(d time.Duration) Option {
	return func(o *options) { o.invoke = append(o.invoke, invoke.WithDialRetry(d)) }
}

// WithUploadRate bounds each namespace's uploads to perMinute on average with bursts of burst
// (429 throttled with Retry-After beyond), besides at most UploadsInFlight at once. The defaults
// are DefaultUploadsPerMinute and DefaultUploadBurst; perMinute <= 0 is no rate limit.
func WithUploadRate(perMinute float64, burst int) Option {
	return func(o *options) { o.uploadRate, o.uploadBurst = perMinute, burst }
}

// WithMaxHeld bounds the requests of one function /fn/ holds while every instance is at its
// concurrency or none is ready yet (default DefaultMaxHeld); beyond it, 429 throttled.
func WithMaxHeld(n int) Option {
	return func(o *options) { o.invoke = append(o.invoke, invoke.WithMaxHeld(n)) }
}

// DefaultMaxHeld is WithMaxHeld's default.
const DefaultMaxHeld = invoke.DefaultMaxHeld

// WithFunctionDomain also serves every function at its own origin, https://<name>--<ns>.<domain>/
// (runspec.FunctionHost), so that one function's pages cannot script another's. No host below
// domain serves the API. The default "" serves functions under /fn/ only.
func WithFunctionDomain(domain string) Option {
	return func(o *options) {
		o.fnDomain = strings.TrimSuffix(strings.TrimPrefix(domain, "."), ".")
		o.invoke = append(o.invoke, invoke.WithFunctionDomain(domain))
	}
}

// WithRuntimePolicy is the install's view of the runtime catalog (apiv1.RuntimePolicy): the
// runtimes it blocks beyond the catalog's dates (--block-runtime), and its clock. GET /v1/runtimes
// lists the catalog under it, and function creates and updates are admitted by it: a deprecated
// runtime with a `Warning` header and a Warning event, a blocked one refused unless the function
// is already on it. The default blocks nothing beyond the catalog's dates, on the real clock.
func WithRuntimePolicy(p apiv1.RuntimePolicy) Option { return func(o *options) { o.runtimes = p } }

// Server is the API. Its Handler serves every route.
type Server struct {
	o       options
	b       objects.Backend
	router  *mux.Router
	handler http.Handler
	eventFn http.Handler  // /fn/ for in-process event sources
	fn      *invoke.Proxy // /fn/
	// dispatcher delivers asynchronous invocations (RunAsync); nil without a queue.
	dispatcher *async.Dispatcher
	// deliveries counts what becomes of events (sless_deliveries_total).
	deliveries *delivery.Metrics
	metrics    *metrics
	uploads    *tenantLimits
	// warnings records the warnings of function writes (a deprecated runtime) in the functions'
	// event logs.
	warnings *fnlog.Events
	// draining fails /readyz once the replica is told to stop.
	draining atomic.Bool
	// drained is closed by Drain: followed log and event streams end.
	drained   chan struct{}
	drainOnce sync.Once
	// followers counts each namespace's followed log and event streams (followSlot), logReads
	// its log reads without follow (logSlot).
	followMu  sync.Mutex
	followers map[string]int
	logReads  map[string]int
}

// New makes the API on a backend.
func New(b objects.Backend, opts ...Option) (*Server, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	o := options{
		uploadLimit: DefaultUploadLimit,
		publicURL:   "http://127.0.0.1:8080",
		uploadRate:  DefaultUploadsPerMinute,
		uploadBurst: DefaultUploadBurst,
		ready:       func(context.Context) error { return nil },
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.verifier == nil {
		return nil, errors.New("api: WithVerifier is required: every /v1 route needs verified tokens")
	}
	if err := o.runtimes.Validate(); err != nil {
		return nil, fmt.Errorf("api: WithRuntimePolicy: %w", err)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, b: b, metrics: newMetrics(), uploads: newTenantLimits(o.uploadRate, o.uploadBurst), warnings: fnlog.NewEvents(b.Code),
		drained: make(chan struct{}), followers: map[string]int{}, logReads: map[string]int{}}
	s.fn = invoke.New(b, append(o.invoke, invoke.WithMetrics(s.metrics.reg), invoke.WithAsync(s.wakeAsync, s.asyncStatusURL))...)
	s.router = s.routes()
	// /fn/ is the hot path: it skips the router's regexp matching of every /v1 route.
	fn := s.requestID(s.recoverPanics(s.observe(fnRoute, s.fn)))
	s.eventFn = s.requestID(s.recoverPanics(s.observe(fnRoute, s.fn.Events())))
	s.deliveries = o.deliveries
	if s.deliveries == nil {
		s.deliveries = delivery.NewMetrics()
		s.metrics.reg.MustRegister(s.deliveries.Collectors()...)
	}
	s.dispatcher = s.newDispatcher()
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			// Each client learns with its next answer to go elsewhere, and closes the connection
			// itself: nothing is closed under a request it is sending.
			w.Header().Set("Connection", "close")
		}
		// On a function's host every path is the function's (checked before the path).
		if s.fn.Serves(r) {
			fn.ServeHTTP(w, r)
			return
		}
		s.router.ServeHTTP(w, r)
	})
	return s, nil
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return s.handler }

// Events is /fn/ for the platform's event sources in this process (invoke.Proxy.Events): never
// serve it on a listener.
func (s *Server) Events() http.Handler { return s.eventFn }

// FunctionEvents is the API's writer of functions' events (fnlog): an event source in this
// process records its dead letters through it, so that one writer appends to each event log.
func (s *Server) FunctionEvents() *fnlog.Events { return s.warnings }

// Activator is /fn/'s router and hold queue: its Loads are what the autoscaler decides from.
func (s *Server) Activator() *activator.Activator { return s.fn.Activator() }

// LoadsHandler is /fn/'s load report to the autoscaler (invoke.Proxy.LoadsHandler): serve it on
// an internal listener only.
func (s *Server) LoadsHandler(pokes *invoke.Pokes) http.Handler { return s.fn.LoadsHandler(pokes) }

// Invocations is where /fn/ records calls.
func (s *Server) Invocations() objects.Invocations { return s.b.Invocations }

// Metrics is the registry the server's metrics are on, for a backend to add its own collectors
// (the build pipeline's, when it runs in the same process) and to serve with MetricsHandler.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics.reg }

// routes is the whole router in one place.
func (s *Server) routes() *mux.Router {
	r := mux.NewRouter().SkipClean(true).UseEncodedPath()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotFound, "no route for %s %s", r.Method, r.URL.EscapedPath()))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, &apiv1.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: r.Method + " is not allowed on " + r.URL.EscapedPath()})
	})
	r.Use(s.requestID, s.recoverPanics, func(next http.Handler) http.Handler { return s.observe("", next) })

	r.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet)
	// No /metrics here: its series name every tenant's namespace and functions. MetricsHandler
	// serves them on a listener of their own.
	r.HandleFunc("/openapi.json", serveOpenAPI).Methods(http.MethodGet)
	// The install's runtimes: any valid token, no namespace.
	r.Handle("/v1/runtimes", s.authenticateAny(http.HandlerFunc(s.listRuntimes))).Methods(http.MethodGet)

	// A namespace's event source outside this process reports its deliveries (its event token).
	r.HandleFunc("/events/{ns}/deliveries", s.deliveryReport).Methods(http.MethodPost)
	v1 := r.PathPrefix("/v1/namespaces/{ns}").Subrouter()
	v1.Use(s.authenticate)
	v1.HandleFunc("/ensure", s.ensureNamespace).Methods(http.MethodPost)
	v1.HandleFunc("", s.deleteNamespace).Methods(http.MethodDelete)
	v1.HandleFunc("/egress", s.getEgress).Methods(http.MethodGet)
	v1.HandleFunc("/egress", s.putEgress).Methods(http.MethodPut)
	k := s.kinds()
	v1.HandleFunc("/functions", k.functions.list).Methods(http.MethodGet)
	v1.HandleFunc("/functions", k.functions.create(s)).Methods(http.MethodPost)
	v1.HandleFunc("/functions/{name}", k.functions.get).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}", k.functions.put).Methods(http.MethodPut)
	v1.HandleFunc("/functions/{name}", k.functions.delete).Methods(http.MethodDelete)
	v1.HandleFunc("/functions/{name}/upload", s.upload).Methods(http.MethodPost)
	v1.HandleFunc("/functions/{name}/invocations", s.invocations).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}/logs", s.logs).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}/events", s.events).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}/async/{id}", s.getAsync).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}/dead-letters", s.deadLetters).Methods(http.MethodGet)
	v1.HandleFunc("/functions/{name}/dead-letters/{id}/redrive", s.redrive).Methods(http.MethodPost)
	v1.HandleFunc("/triggers", k.triggers.list).Methods(http.MethodGet)
	v1.HandleFunc("/triggers", k.triggers.create(s)).Methods(http.MethodPost)
	v1.HandleFunc("/triggers/{name}", k.triggers.get).Methods(http.MethodGet)
	v1.HandleFunc("/triggers/{name}", s.patchTrigger).Methods(http.MethodPatch)
	v1.HandleFunc("/triggers/{name}", k.triggers.delete).Methods(http.MethodDelete)
	v1.HandleFunc("/jobs", k.jobs.list).Methods(http.MethodGet)
	v1.HandleFunc("/jobs", k.jobs.create(s)).Methods(http.MethodPost)
	v1.HandleFunc("/jobs/{name}", k.jobs.get).Methods(http.MethodGet)
	v1.HandleFunc("/jobs/{name}", k.jobs.put).Methods(http.MethodPut)
	v1.HandleFunc("/jobs/{name}", k.jobs.delete).Methods(http.MethodDelete)
	v1.HandleFunc("/secrets", s.listSecrets).Methods(http.MethodGet)
	v1.HandleFunc("/secrets/{name}", s.getSecret).Methods(http.MethodGet)
	v1.HandleFunc("/secrets/{name}", s.putSecret).Methods(http.MethodPut)
	v1.HandleFunc("/secrets/{name}", s.deleteSecret).Methods(http.MethodDelete)

	// The public invoke proxy /fn/{ns}/{name}[/…] is dispatched before this router (see New): no
	// auth (as in the seed); the function decides what it serves.
	return r
}

// Drain makes /readyz fail from now on (it latches) and every answer close its connection: a
// replica told to stop leaves its Service's endpoints, and its clients reconnect elsewhere, while it
// finishes the requests it has (Serve's graceful shutdown).
func (s *Server) Drain() {
	s.draining.Store(true)
	s.drainOnce.Do(func() { close(s.drained) })
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotReady, "draining: this replica is shutting down"))
		return
	}
	if err := s.o.ready(r.Context()); err != nil {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotReady, "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// MaxHeaderBytes bounds a request's headers; beyond it the server answers 431.
const MaxHeaderBytes = 64 << 10

// NewHTTPServer wraps h in an http.Server with the timeouts the API needs: headers within 10 s,
// at most MaxHeaderBytes of them (431 beyond), idle keep-alives closed after 2 minutes. Whole requests are bounded at
// 15 minutes here; handlers set tighter deadlines per route (uploads, invocations).
func NewHTTPServer(addr string, h http.Handler, logger *slog.Logger) *http.Server {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       15 * time.Minute,
		WriteTimeout:      15 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	if logger != nil {
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	return srv
}

// drain discards what is left of a request body (bounded), so keep-alive connections survive errors.
func drain(r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
}

// Serve runs srv on ln until ctx ends, then shuts down gracefully: the listener closes at once and
// in-flight requests get up to grace to finish. It returns nil after a clean shutdown.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// FunctionURL is the public /fn/ URL of a function.
func (s *Server) FunctionURL(ns, name string) string {
	return runspec.FunctionURL(s.o.publicURL, ns, name)
}
