package invoke

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// Defaults of the options below.
const (
	DefaultBodyLimit = 6 << 20
	DefaultMaxHeld   = 100
	DefaultDialRetry = 3 * time.Second
)

// Option configures New.
type Option func(*options)

type options struct {
	bodyLimit int64
	transport http.RoundTripper
	dialRetry time.Duration
	fnDomain  string
	maxHeld   int
	registry  prometheus.Registerer
	eventKey  []byte // WithEventKey
	// asyncWake and asyncStatusURL: WithAsync.
	asyncWake      func()
	asyncStatusURL func(ns, name, id string) string
}

// WithBodyLimit bounds a request body sent to a function. The default is DefaultBodyLimit (6 MiB).
func WithBodyLimit(n int64) Option { return func(o *options) { o.bodyLimit = n } }

// WithTransport sets the transport to functions. The default keeps 64 idle connections per
// function and dials with a 5-second timeout.
func WithTransport(t http.RoundTripper) Option { return func(o *options) { o.transport = t } }

// WithDialRetry is how long a request is retried on a function it cannot connect to (nothing was
// sent, so any request may be retried), on another instance each time: an instance just reported
// ready that is not reachable yet, or one a rollout replaced. The default is DefaultDialRetry (3 s);
// 0 disables it.
func WithDialRetry(d time.Duration) Option { return func(o *options) { o.dialRetry = d } }

// WithMaxHeld bounds the requests of one function held while every instance is at its concurrency
// or none is ready yet; beyond it, 429 throttled. The default is DefaultMaxHeld.
func WithMaxHeld(n int) Option { return func(o *options) { o.maxHeld = n } }

// WithFunctionDomain also serves every function at its own origin, https://<name>--<ns>.<domain>/
// (runspec.FunctionHost), so that one function's pages cannot script another's. The default ""
// serves functions under /fn/ only.
func WithFunctionDomain(domain string) Option {
	return func(o *options) { o.fnDomain = strings.TrimSuffix(strings.TrimPrefix(domain, "."), ".") }
}

// WithMetrics registers the per-function series (requests, durations, cold starts, in flight,
// held, replicas) on r. The default registers them nowhere.
func WithMetrics(r prometheus.Registerer) Option { return func(o *options) { o.registry = r } }

// Proxy serves /fn/{ns}/{name}[/…] (and, with WithFunctionDomain, every path on a function's own
// host): the public entry to a function, no authentication (the function decides what it serves).
// It hosts the activator, which holds a request no instance can take yet.
type Proxy struct {
	o     options
	view  *objects.ServingView
	inv   objects.Invocations
	act   *activator.Activator
	proxy *httputil.ReverseProxy
	m     *metrics
	async objects.AsyncQueue // nil: no asynchronous invocations
}

// New serves the functions of backend b: it reads functions and triggers from b.Serving (the
// stores when nil), routes to b.Instances (or the one instance b.Resolver answers) and records
// each call in b.Invocations.
func New(b objects.Backend, opts ...Option) *Proxy {
	o := options{bodyLimit: DefaultBodyLimit, dialRetry: DefaultDialRetry, maxHeld: DefaultMaxHeld}
	for _, opt := range opts {
		opt(&o)
	}
	if o.transport == nil {
		o.transport = &http.Transport{
			Proxy:                 nil, // functions are reached directly, never through an HTTP proxy
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			// A proxy passes bodies through as they are; transparent gzip would decode them.
			DisableCompression: true,
		}
	}
	p := &Proxy{o: o, view: b.Serving, inv: b.Invocations, async: b.Async}
	if p.view == nil {
		p.view = &objects.ServingView{Functions: b.Functions, Triggers: b.Triggers}
	}
	var src activator.Source = resolverSource{b.Resolver}
	var aopts []activator.Option
	if b.Instances != nil {
		src = b.Instances
	}
	if b.Scaler != nil {
		aopts = append(aopts, activator.WithScaler(b.Scaler))
	}
	p.act = activator.New(src, aopts...)
	p.m = newMetrics(p.act.Loads, p.view)
	if o.registry != nil {
		p.m.register(o.registry)
	}
	p.proxy = p.newProxy()
	return p
}

// Activator is the router and hold queue: its Loads are what the autoscaler decides from.
func (p *Proxy) Activator() *activator.Activator { return p.act }

// Serves reports whether r is for a function: under /fn/, or on a function's own host.
func (p *Proxy) Serves(r *http.Request) bool {
	if p.o.fnDomain != "" {
		if _, _, under, _ := runspec.SplitFunctionHost(p.o.fnDomain, r.Host); under {
			return true
		}
	}
	return strings.HasPrefix(r.URL.Path, "/fn/")
}

// Forget drops what the proxy keeps of a deleted function: its activator state and its series.
func (p *Proxy) Forget(ns, name string) {
	p.act.Forget(ns, name)
	p.m.forget(ns, name)
}

// resolverSource makes a Resolver an activator.Source: the one instance it answers, ready.
type resolverSource struct{ r objects.Resolver }

func (s resolverSource) Instances(ctx context.Context, ns, name string) ([]activator.Instance, error) {
	u, err := s.r.Resolve(ctx, ns, name)
	var nr *objects.NotReadyError
	if errors.As(err, &nr) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []activator.Instance{{ID: u.Host, URL: u, Ready: true}}, nil
}

// A response writer the proxy is given may keep the answer's status and the cause of an error for
// the request's log line (the API's recorder does); else the proxy keeps the status itself.
type (
	statusKeeper interface{ Status() int }
	causeKeeper  interface{ SetCause(error) }
)

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Status() int                 { return w.status }
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// RequestID is r's X-Request-Id: the client's when well formed, else a new one, which is then set
// on r. The API's every answer carries it; /fn/ forwards it to the function and records it.
func RequestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	if !requestIDPattern.MatchString(id) {
		var b [8]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
		r.Header.Set("X-Request-Id", id)
	}
	return id
}

// writeError answers /fn/'s own error, marked with apiv1.HeaderError so an event source tells it
// from the function's answer (which never carries that header: ModifyResponse drops it).
func writeError(w http.ResponseWriter, err *apiv1.Error) {
	w.Header().Set(apiv1.HeaderError, err.Code)
	err.Write(w)
}

// fail answers err for function name: not_found, an API error as it is, else internal (the cause
// goes to the request's log line, not to the caller).
func fail(w http.ResponseWriter, name string, err error) {
	ae := notFound(name, err)
	if ae.Code == apiv1.CodeInternal {
		if ck, ok := w.(causeKeeper); ok {
			ck.SetCause(err)
		}
	}
	writeError(w, ae)
}

func notFound(name string, err error) *apiv1.Error {
	if errors.Is(err, objects.ErrNotFound) {
		return apiv1.Errorf(apiv1.CodeNotFound, "function %q not found", name)
	}
	var ae *apiv1.Error
	if errors.As(err, &ae) {
		return ae
	}
	var nr *objects.NotReadyError
	if errors.As(err, &nr) {
		return apiv1.Errorf(apiv1.CodeNotReady, "%s", nr.Reason)
	}
	return &apiv1.Error{Status: http.StatusInternalServerError, Code: apiv1.CodeInternal, Message: "internal error; see the server log"}
}

type proxyTarget struct {
	ns, name string
	url      *url.URL
	path     string // escaped path for the function, "/" at least
	prefix   string // "/fn/{ns}/{name}"; "" on the function's own host
	lease    *activator.Lease
	lim      activator.Limits
	start    time.Time // the request's arrival
	// requestID is the request's X-Request-Id, forwarded and recorded.
	requestID string
}

type proxyTargetKey struct{}

// newProxy is the one ReverseProxy every invocation goes through: Rewrite (not Director), so the
// inbound Forwarded/X-Forwarded-* headers are dropped before SetXForwarded sets ours; errors in the
// API's envelope. Streaming needs no FlushInterval: ReverseProxy flushes every write of a response
// without Content-Length (chunked, text/event-stream) at once, and buffers sized ones, which saves
// a write per response.
func (p *Proxy) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(proxyTargetKey{}).(*proxyTarget)
			pr.SetURL(t.url)
			pr.Out.URL.RawPath = t.path
			if p, err := url.PathUnescape(t.path); err == nil {
				pr.Out.URL.Path = p
			}
			pr.SetXForwarded()
			if t.prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
			}
			pr.Out.Header.Set("X-Request-Id", t.requestID)
			// The caller's credentials for the platform are not the function's business. Cookies
			// reach a function only on its own host: under /fn/ the browser also sends what the
			// origin's other residents set for "/" (an SSO proxy in front of the API, or another
			// tenant's page through document.cookie).
			pr.Out.Header.Del("Authorization")
			if t.prefix != "" {
				pr.Out.Header.Del("Cookie")
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			t := resp.Request.Context().Value(proxyTargetKey{}).(*proxyTarget)
			resp.Header.Del(apiv1.HeaderError)
			confineResponse(resp.Header, t.prefix)
			if len(resp.Header["Server-Timing"]) > 0 {
				dropPlatformTimings(resp.Header)
			}
			if t.lease != nil {
				if tm, ok := t.lease.Timing(); ok {
					resp.Header.Add("Server-Timing", serverTiming(tm, t.lease.Cold))
				}
			}
			if t.lease != nil && t.lease.Cold {
				p.m.coldStarts.WithLabelValues(t.ns, t.name).Inc()
				p.m.coldStartSecs.WithLabelValues(t.ns, t.name).Observe(time.Since(t.start).Seconds())
			}
			return nil
		},
		Transport:  &dialRetry{next: p.o.transport, budget: p.o.dialRetry, act: p.act},
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var mb *http.MaxBytesError
			switch {
			case errors.As(err, &mb):
				writeError(w, apiv1.Errorf(apiv1.CodePayloadTooLarge, "the request body exceeds the limit of %d bytes", mb.Limit))
			case errors.Is(err, context.DeadlineExceeded):
				writeError(w, apiv1.Errorf(apiv1.CodeUpstreamTimeout, "the function did not answer within its timeout"))
			case errors.Is(err, context.Canceled):
				// The caller went away; nobody reads this.
				w.WriteHeader(499)
			default:
				// The cause names the instance's address (and the platform's): it goes to this
				// request's log line, not to the caller.
				if ck, ok := w.(causeKeeper); ok {
					ck.SetCause(err)
				}
				writeError(w, apiv1.Errorf(apiv1.CodeUpstreamError, "the function's connection failed before it answered"))
			}
		},
	}
}

// ServeHTTP serves /fn/{ns}/{name}[/…], and every path on a function's own host
// (WithFunctionDomain): the public entry to a Ready function (DESIGN.md §5).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sk, ok := w.(statusKeeper)
	if !ok {
		sw := &statusWriter{ResponseWriter: w}
		w, sk = sw, sw
	}
	status := func() int { return cmp.Or(sk.Status(), http.StatusOK) }
	requestID := RequestID(r)
	// Event headers are the platform's event sources' (Events), never a public caller's: a
	// handler may trust them.
	var source, messageID string
	events := p.trustsEvents(r)
	if events {
		source, messageID = r.Header.Get(apiv1.HeaderEventSource), r.Header.Get(apiv1.HeaderEventMessageID)
	} else {
		dropEventHeaders(r.Header)
	}
	var ns, name, rest, prefix string
	if p.o.fnDomain != "" {
		if hns, hname, under, ok := runspec.SplitFunctionHost(p.o.fnDomain, r.Host); under {
			if !ok {
				writeError(w, apiv1.Errorf(apiv1.CodeNotFound, "no function is served at host %q: use <function>--<namespace>.%s", r.Host, p.o.fnDomain))
				return
			}
			ns, name, rest = hns, hname, r.URL.EscapedPath()
			if rest == "" || rest[0] != '/' {
				rest = "/" + rest
			}
		}
	}
	if name == "" {
		var ok bool
		if ns, name, rest, ok = splitFnPath(r.URL.EscapedPath()); !ok {
			writeError(w, apiv1.Errorf(apiv1.CodeNotFound, "use /fn/{namespace}/{function}[/path]"))
			return
		}
		prefix = "/fn/" + mustEscape(ns) + "/" + mustEscape(name)
	}
	start := time.Now()
	// Only requests an instance was given get records (so only existing functions do). /fn/ is
	// public: refusals (429 beyond the hold queue or the quota, 503 not ready or disabled, 504 held
	// past the timeout) cost anyone nothing to cause, and would push real invocations out of the
	// history and fill its store.
	forwarded := false
	defer func() {
		if !forwarded {
			return
		}
		p.inv.Record(context.WithoutCancel(r.Context()), ns, name, apiv1.Invocation{
			Time: start.UTC(), Status: status(), RequestID: requestID,
			DurationMS: float64(time.Since(start).Microseconds()) / 1000, Source: source, MessageID: messageID,
		})
	}()
	fn, err := p.view.Functions.Get(r.Context(), ns, name)
	if err == nil && fn.Deleting {
		err = objects.ErrNotFound // deleted: its last instances may still run while the backend cleans up
	}
	if err != nil {
		if errors.Is(err, objects.ErrNotFound) && p.act.Known(ns, name) {
			p.Forget(ns, name) // deleted other than through the API (kubectl, another replica)
		}
		fail(w, name, err)
		return
	}
	if !events {
		// Asynchronous: stored and answered now; the dispatcher sends it on through Events (which
		// never reads this header). Accepted while a trigger disables the function, as a throttled
		// one is: the dispatcher retries it until it is served or max_age_sec passes.
		if async, aerr := asyncRequested(r); aerr != nil {
			writeError(w, aerr)
			return
		} else if async {
			p.enqueue(w, r, ns, name, rest, fn)
			return
		}
	}
	triggers, err := p.view.Triggers.List(r.Context(), ns)
	if err != nil {
		fail(w, name, err)
		return
	}
	if off, names := runspec.DisabledBy(objects.WireTriggers(triggers), name); off {
		writeError(w, apiv1.Errorf(apiv1.CodeNotReady, "function %q is disabled by trigger %s; enable one to serve requests",
			name, strings.Join(names, ", ")))
		return
	}
	// A running instance serves even while a new version is Pending or Building (or failed to
	// build): updates must not interrupt traffic. With none, the request waits for one if the
	// backend can start one (a built version exists); else it says what the function waits for.
	notReady := func() *apiv1.Error {
		view := objects.FunctionView("", ns, fn)
		msg := fmt.Sprintf("function %q is %s", name, strings.ToLower(orDefault(string(view.Status.Phase), string(apiv1.PhasePending))))
		if view.Status.Message != "" {
			msg += ": " + view.Status.Message
		}
		if view.Status.Phase == apiv1.PhaseReady {
			msg = fmt.Sprintf("function %q has no instance running", name)
		}
		return apiv1.Errorf(apiv1.CodeNotReady, "%s", msg)
	}
	timeout := time.Duration(orInt(fn.Spec.TimeoutSec, apiv1.DefaultTimeoutSec))*time.Second + time.Second
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	t := &proxyTarget{ns: ns, name: name, path: rest, prefix: prefix, lim: activator.Limits{
		Concurrency: fn.Spec.WithScaleDefaults().Concurrency, MaxHeld: p.o.maxHeld, NoStart: fn.Status.Image == "",
		ScaleLimited: fn.Status.IsScaleLimited()}, requestID: requestID}
	lease, err := p.act.Acquire(ctx, ns, name, t.lim)
	switch {
	case err == nil:
	case errors.Is(err, activator.ErrNoInstance):
		writeError(w, notReady())
		return
	case errors.Is(err, activator.ErrScaleLimited), errors.Is(err, activator.ErrThrottled) && t.lim.ScaleLimited:
		w.Header().Set("Retry-After", "5")
		// The quota's details (namespace, usage) are for the tenant, in the function's status: /fn/
		// is public.
		writeError(w, apiv1.Errorf(apiv1.CodeThrottled, "function %q has no free instance and its namespace's quota allows no more now", name))
		return
	case errors.Is(err, activator.ErrThrottled):
		w.Header().Set("Retry-After", "1")
		writeError(w, apiv1.Errorf(apiv1.CodeThrottled, "function %q: every instance is at its concurrency (%d) and %d requests wait already",
			name, t.lim.Concurrency, t.lim.MaxHeld))
		return
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, apiv1.Errorf(apiv1.CodeUpstreamTimeout, "no instance of function %q was free within its timeout", name))
		return
	case errors.Is(err, context.Canceled):
		w.WriteHeader(499)
		return
	default:
		fail(w, name, err)
		return
	}
	t.lease, t.url, t.start = lease, lease.URL(), start
	forwarded = true
	defer func() {
		t.lease.Release()
		p.m.fnRequests.WithLabelValues(ns, name, CodeLabel(status())).Inc()
		p.m.fnSeconds.WithLabelValues(ns, name).Observe(time.Since(start).Seconds())
	}()
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(timeout + 10*time.Second))
	rc.SetWriteDeadline(time.Now().Add(timeout + 10*time.Second))
	r.Body = http.MaxBytesReader(w, r.Body, p.o.bodyLimit)
	ctx = context.WithValue(ctx, proxyTargetKey{}, t)
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
}

func mustEscape(s string) string { return url.PathEscape(s) }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// bufferPool reuses ReverseProxy's copy buffers (32 KiB each; allocating and zeroing one per
// request was a visible share of the proxy's CPU).
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

// splitFnPath splits an escaped "/fn/{ns}/{name}[/rest]" into its unescaped names and the escaped
// rest ("/" when absent).
func splitFnPath(escaped string) (ns, name, rest string, ok bool) {
	p, found := strings.CutPrefix(escaped, "/fn/")
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(p, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return "", "", "", false
	}
	var err error
	if ns, err = url.PathUnescape(parts[0]); err != nil {
		return "", "", "", false
	}
	if name, err = url.PathUnescape(parts[1]); err != nil {
		return "", "", "", false
	}
	rest = "/"
	if len(parts) == 3 {
		rest += parts[2]
	}
	return ns, name, rest, true
}

// dialRetry retries a request whose connection could not be made, until budget is spent: no byte
// of it reached the function, so even a POST is safe to send again. Each retry takes a slot on
// another instance (the activator drops the one it could not reach), since that one may be gone
// for good (a rollout replaced the pod) while another one serves.
type dialRetry struct {
	next   http.RoundTripper
	budget time.Duration
	act    *activator.Activator
}

func (d *dialRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	if d.budget <= 0 {
		return d.next.RoundTrip(req)
	}
	out := req // cloned only when something must change: the success path costs nothing
	var body *keptBody
	if req.Body != nil && req.Body != http.NoBody {
		// The transport closes the body of a failed request; a retry needs it open and unread.
		// The server closes the real one when the handler returns (not here: the transport may
		// still be sending it after the response headers arrived).
		body = &keptBody{r: req.Body}
		out = req.Clone(req.Context())
		out.Body = body
	}
	deadline := time.Now().Add(d.budget)
	wait := 20 * time.Millisecond
	for {
		resp, err := d.next.RoundTrip(out)
		var op *net.OpError
		remaining := time.Until(deadline)
		if err == nil || !errors.As(err, &op) || op.Op != "dial" || (body != nil && body.read) || remaining <= 0 {
			return resp, err
		}
		select {
		case <-req.Context().Done():
			return nil, err
		case <-time.After(min(wait, remaining)):
		}
		wait = min(2*wait, 250*time.Millisecond)
		if t, ok := req.Context().Value(proxyTargetKey{}).(*proxyTarget); ok && t.lease != nil && d.act != nil {
			t.lease.Retry()
			lease, aerr := d.act.Acquire(req.Context(), t.ns, t.name, t.lim)
			if aerr != nil {
				return nil, err // the deferred Release of the old lease is a no-op: Retry released it
			}
			t.lease = lease
			u := lease.URL()
			if out == req {
				out = req.Clone(req.Context())
			}
			out.URL.Scheme, out.URL.Host = u.Scheme, u.Host
		}
	}
}

// keptBody survives the transport's Close and remembers whether it was read.
type keptBody struct {
	r    io.ReadCloser
	read bool
}

func (b *keptBody) Read(p []byte) (int, error) { b.read = true; return b.r.Read(p) }
func (b *keptBody) Close() error               { return nil }
