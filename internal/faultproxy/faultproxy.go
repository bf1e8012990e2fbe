package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sless-dev/sless/internal/ports"
)

// Option configures a Proxy.
type Option func(*Proxy)

// WithStatus is the status refused requests are answered with. The default is 503.
func WithStatus(code int) Option { return func(p *Proxy) { p.status = code } }

// WithMethods makes the fault refuse only requests with one of these methods (others pass). The
// default refuses every request.
func WithMethods(methods ...string) Option {
	return func(p *Proxy) {
		p.match = func(r *http.Request) bool { return slices.Contains(methods, r.Method) }
	}
}

// WithMatch makes the fault refuse only the requests match returns true for.
func WithMatch(match func(*http.Request) bool) Option { return func(p *Proxy) { p.match = match } }

// WithBody is what refused requests are answered with (the default is a line of text naming the
// fault).
func WithBody(contentType, body string) Option {
	return func(p *Proxy) { p.contentType, p.body = contentType, body }
}

// Refusal is a request the fault answered.
type Refusal struct {
	Time         time.Time
	Method, Path string
	Status       int // what it was answered
}

// Proxy forwards to its target and, while failing, refuses the requests it matches.
type Proxy struct {
	match       func(*http.Request) bool
	contentType string

	addr   string
	srv    *http.Server
	ln     net.Listener
	served chan struct{}

	mu          sync.Mutex
	status      int
	body        string
	defaultBody bool // body is defaultBody(status)
	failing     bool
	until       time.Time // when FailFor's fault ends (zero: until Heal)
	refused     []Refusal
	passed      int
}

// Start runs a proxy to target (an http:// URL) on host ("127.0.0.1"), on a free port there.
func Start(host, target string, opts ...Option) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an http(s) URL", target)
	}
	p := &Proxy{status: http.StatusServiceUnavailable, match: func(*http.Request) bool { return true },
		contentType: "text/plain; charset=utf-8", served: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	if p.body == "" {
		p.body, p.defaultBody = defaultBody(p.status), true
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // absolute URLs the target builds point back at the proxy
			r.SetXForwarded()
		},
		FlushInterval: -1,
		// As a transparent reverse proxy (Apache's ProxyPassReverse): absolute URLs the target
		// names in its challenge and redirects point at the proxy too, so a registry's token
		// realm is on the same host:port clients were given (ggcr refuses a realm elsewhere on a
		// private address).
		ModifyResponse: func(r *http.Response) error {
			for _, h := range []string{"Www-Authenticate", "Location"} {
				if v := r.Header.Get(h); v != "" {
					r.Header.Set(h, strings.ReplaceAll(v, "://"+u.Host, "://"+p.addr))
				}
			}
			return nil
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, body, refused := p.refuse(r); refused {
			io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)) // a client still sending may read the answer
			w.Header().Set("Content-Type", p.contentType)
			w.WriteHeader(status)
			io.WriteString(w, body)
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	// A port that was free a moment ago may be taken by the time we bind it: try a few.
	for range 10 {
		var port int
		if port, err = ports.FreeOn(host); err != nil {
			return nil, err
		}
		p.addr = net.JoinHostPort(host, fmt.Sprint(port))
		if p.ln, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	go func() { p.srv.Serve(p.ln); close(p.served) }()
	return p, nil
}

func defaultBody(status int) string {
	return fmt.Sprintf("faultproxy: injected %d %s\n", status, http.StatusText(status))
}

// refuse reports whether r is answered by the fault, and with what; it records a refusal.
func (p *Proxy) refuse(r *http.Request) (status int, body string, refused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing && !p.until.IsZero() && !time.Now().Before(p.until) {
		p.failing, p.until = false, time.Time{}
	}
	if !p.failing || !p.match(r) {
		p.passed++
		return 0, "", false
	}
	p.refused = append(p.refused, Refusal{Time: time.Now(), Method: r.Method, Path: r.URL.Path, Status: p.status})
	return p.status, p.body, true
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// URL is "http://" + Addr().
func (p *Proxy) URL() string { return "http://" + p.addr }

// Fail turns the fault on until Heal.
func (p *Proxy) Fail() { p.failFor(0) }

// FailFor turns the fault on for d from now (it ends by itself, or at Heal).
func (p *Proxy) FailFor(d time.Duration) { p.failFor(d) }

func (p *Proxy) failFor(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing, p.until = true, time.Time{}
	if d > 0 {
		p.until = time.Now().Add(d)
	}
}

// SetStatus changes the status refused requests are answered with from now on (WithStatus).
func (p *Proxy) SetStatus(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = code
	if p.defaultBody {
		p.body = defaultBody(code)
	}
}

// Heal turns the fault off: every request is forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing, p.until = false, time.Time{}
}

// Failing reports whether the fault is on now.
func (p *Proxy) Failing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failing && (p.until.IsZero() || time.Now().Before(p.until))
}

// Refused is how many requests the fault answered so far.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.refused)
}

// Refusals are the requests the fault answered, oldest first.
func (p *Proxy) Refusals() []Refusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refused)
}

// Passed is how many requests were forwarded to the target.
func (p *Proxy) Passed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passed
}

// Close stops listening and ends the connections it serves.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if err != nil {
		err = p.srv.Close()
	}
	<-p.served
	return err
}
