package indexproxy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Proxy forwards installers' reads to allowed hosts only.
type Proxy struct {
	allowed   map[string]string // host:port → "Basic …" ("" for no credentials)
	transport *http.Transport
	log       *slog.Logger
	dialer    net.Dialer

	// TunnelIdle ends a CONNECT tunnel, or a forwarded answer, in which nothing moved for that
	// long, TunnelMax any tunnel after that long (zero: the defaults). Set before serving.
	TunnelIdle, TunnelMax time.Duration
}

// Defaults of the proxy's limits: a package download moves data all along and ends within
// minutes; an idle keep-alive connection is not worth a file descriptor for long.
const (
	DefaultTunnelIdle   = 2 * time.Minute
	DefaultTunnelMax    = 30 * time.Minute
	DefaultIdleTimeout  = 30 * time.Second
	DefaultPerSourceMax = 32
)

// New allows the hosts of indexURLs (their credentials, if any, are added upstream) and the
// extra hosts (host or host:port; https assumed without a port).
func New(indexURLs, extraHosts []string, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{allowed: map[string]string{}, log: log,
		// Never through another proxy from the environment; no redirects are followed (a
		// Transport, not a Client): a redirect goes back to the installer, which asks again.
		transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
			ResponseHeaderTimeout: time.Minute, TLSHandshakeTimeout: 10 * time.Second}}
	for _, raw := range indexURLs {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("index URL %q: want http(s)://host[:port]/path", Sanitize(raw))
		}
		auth := ""
		if u.User != nil {
			pw, _ := u.User.Password()
			auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
		}
		p.allowed[hostPort(u.Host, u.Scheme)] = auth
	}
	for _, h := range extraHosts {
		if h = strings.TrimSpace(h); h != "" {
			if _, ok := p.allowed[hostPort(h, "https")]; !ok {
				p.allowed[hostPort(h, "https")] = ""
			}
		}
	}
	return p, nil
}

// PublicHosts are the public indexes' hosts an installer needs for a runtime whose index is not
// configured ("": pip's and npm's defaults), to allow besides the configured ones.
func PublicHosts(pipIndexURL, npmRegistry string) []string {
	var hosts []string
	if pipIndexURL == "" {
		hosts = append(hosts, "pypi.org", "files.pythonhosted.org")
	}
	if npmRegistry == "" {
		hosts = append(hosts, "registry.npmjs.org")
	}
	return hosts
}

// Sanitize is raw without its credentials: what an installer is given.
func Sanitize(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

func hostPort(host, scheme string) string {
	host = strings.ToLower(host)
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "http" {
		return net.JoinHostPort(strings.Trim(host, "[]"), "80")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "443")
}

// hopHeaders are connection-level, never forwarded (RFC 9110 §7.6.1), plus the installer's own
// proxy and origin credentials: only the proxy's go upstream.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	// The credential is lent to reads only: a PUT or POST from an npm preinstall would publish a
	// package as the platform, a TRACE could echo the header back. Nothing else is forwarded.
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		p.log.Info("index proxy: refused method", "method", r.Method, "host", r.URL.Host)
		w.Header().Set("Allow", "GET, HEAD, CONNECT")
		http.Error(w, "sless index proxy: "+r.Method+" is refused: installers may only read the package indexes (GET, HEAD)", http.StatusMethodNotAllowed)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "sless index proxy: only absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	target := hostPort(r.URL.Host, "http")
	auth, ok := p.allowed[target]
	if !ok {
		p.log.Info("index proxy: refused", "host", target)
		http.Error(w, "sless index proxy: "+target+" is not a configured package index", http.StatusForbidden)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Del("Authorization")
	if auth != "" {
		out.Header.Set("Authorization", auth)
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "sless index proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	p.copyBody(w, resp.Body)
}

// copyBody copies an index's answer to the installer, ending it when neither side moved for
// TunnelIdle: an upstream that stops sending, or an installer that stops reading (its window
// shut), holds no goroutine and connection for ever.
func (p *Proxy) copyBody(w http.ResponseWriter, body io.ReadCloser) {
	idle := p.limit(p.TunnelIdle, DefaultTunnelIdle)
	stalled := time.AfterFunc(idle, func() { body.Close() })
	defer stalled.Stop()
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		stalled.Reset(idle)
		if n > 0 {
			// Flushed at once: the deadline is for this write, not one at the handler's end.
			rc.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// tunnel serves CONNECT to an allowed host: TLS end to end, so no credential can be added.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	target := hostPort(r.Host, "https")
	if _, ok := p.allowed[target]; !ok {
		p.log.Info("index proxy: refused", "host", target)
		http.Error(w, "sless index proxy: "+target+" is not a configured package index", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, err := p.dialer.DialContext(ctx, "tcp", target)
	cancel()
	if err != nil {
		http.Error(w, "sless index proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		up.Close()
		return
	}
	conn, buf, err := rc.Hijack()
	if err != nil {
		up.Close()
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { conn.Close(); up.Close() }) }
	// A tunnel lives at most TunnelMax, and ends when neither side sent anything for TunnelIdle:
	// an install cannot hold connections (and the proxy's file descriptors) open for ever.
	end := time.AfterFunc(p.limit(p.TunnelMax, DefaultTunnelMax), closeBoth)
	defer end.Stop()
	idle := p.limit(p.TunnelIdle, DefaultTunnelIdle)
	go func() {
		defer closeBoth()
		if n := buf.Reader.Buffered(); n > 0 { // bytes the client sent after its CONNECT
			b, _ := buf.Reader.Peek(n)
			if _, err := up.Write(b); err != nil {
				return
			}
		}
		copyIdle(up, conn, idle, conn, up)
	}()
	copyIdle(conn, up, idle, conn, up)
	closeBoth()
}

// copyIdle copies src to dst until either ends or nothing moved in either direction for idle
// (each read pushes both connections' deadlines on).
func copyIdle(dst io.Writer, src net.Conn, idle time.Duration, both ...net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		for _, c := range both {
			c.SetDeadline(time.Now().Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// limit is v, or def when v is unset.
func (p *Proxy) limit(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

// Server is a running proxy.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen serves p on addr ("10.89.3.129:0") until Close. One source address (an install's
// container or pod) may hold DefaultPerSourceMax connections at once; more are closed at once.
func Listen(addr string, p *Proxy) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("index proxy: %w", err)
	}
	ln = &perSource{Listener: ln, max: DefaultPerSourceMax, open: map[string]int{}, log: p.log}
	s := &Server{ln: ln, srv: &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: DefaultIdleTimeout}}
	go s.srv.Serve(ln)
	return s, nil
}

// perSource caps the connections one remote address holds at once.
type perSource struct {
	net.Listener
	max  int
	log  *slog.Logger
	mu   sync.Mutex
	open map[string]int
}

func (l *perSource) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		l.mu.Lock()
		if l.open[host] >= l.max {
			l.mu.Unlock()
			l.log.Info("index proxy: refused a connection: too many from one source", "source", host, "max", l.max)
			c.Close()
			continue
		}
		l.open[host]++
		l.mu.Unlock()
		return &counted{Conn: c, release: func() {
			l.mu.Lock()
			if l.open[host]--; l.open[host] <= 0 {
				delete(l.open, host)
			}
			l.mu.Unlock()
		}}, nil
	}
}

type counted struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *counted) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// Addr is the listener's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the proxy (tunnels already open end with their connections).
func (s *Server) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
