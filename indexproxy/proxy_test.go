package indexproxy_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/indexproxy"
)

func TestProxyAllowsIndexesAndAddsCredentials(t *testing.T) {
	var sawAuth []string
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth = append(sawAuth, r.Header.Get("Authorization"))
		if u, p, ok := r.BasicAuth(); !ok || u != "ix" || p != "s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "simple index")
	}))
	defer index.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "canary") }))
	defer other.Close()
	tlsIndex := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls index") }))
	defer tlsIndex.Close()

	withCreds := strings.Replace(index.URL, "http://", "http://ix:s3cret@", 1) + "/simple"
	p, err := indexproxy.New([]string{withCreds}, []string{strings.TrimPrefix(tlsIndex.URL, "https://")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := indexproxy.Sanitize(withCreds); strings.Contains(got, "s3cret") || got != index.URL+"/simple" {
		t.Errorf("Sanitize = %s", got)
	}
	srv, err := indexproxy.Listen("127.0.0.1:0", p)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxyURL, _ := url.Parse("http://" + srv.Addr())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	get := func(u string, header ...string) (int, string) {
		req, _ := http.NewRequest("GET", u, nil)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(index.URL + "/simple/six/"); code != 200 || body != "simple index" {
		t.Errorf("the index through the proxy: %d %s", code, body)
	}
	// The installer's own Authorization never reaches the index: the proxy's replaces it.
	if code, _ := get(index.URL+"/simple/", "Authorization", "Basic eDp5"); code != 200 || sawAuth[len(sawAuth)-1] != "Basic aXg6czNjcmV0" {
		t.Errorf("credentials upstream: %d %v", code, sawAuth)
	}
	if code, body := get(other.URL + "/"); code != http.StatusForbidden || strings.Contains(body, "canary") {
		t.Errorf("another host through the proxy: %d %s", code, body)
	}
	if code, body := get(tlsIndex.URL + "/"); code != 200 || body != "tls index" {
		t.Errorf("an allowed https host (CONNECT): %d %s", code, body)
	}
	// CONNECT to a host that is not allowed, e.g. the index's port on another address.
	if code, _ := get(strings.Replace(tlsIndex.URL, "127.0.0.1", "localhost", 1) + "/"); code == 200 {
		t.Error("CONNECT to a host not allowed went through")
	}
	// Origin-form requests (the proxy used as a server) are refused.
	resp, err := http.Get("http://" + srv.Addr() + "/simple/")
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %v %v", resp, err)
	}
}

func TestProxyRefusesBadIndexURLs(t *testing.T) {
	for _, u := range []string{"ftp://x/", "http://", "::"} {
		if _, err := indexproxy.New([]string{u}, nil, nil); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

// The credential is lent to reads only: every other method is 405 and nothing reaches the index.
func TestProxyLendsItsCredentialToReadsOnly(t *testing.T) {
	var mu sync.Mutex
	var seen []string // method and Authorization of every request the index got
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer index.Close()
	p, err := indexproxy.New([]string{strings.Replace(index.URL, "http://", "http://ix:s3cret@", 1)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := indexproxy.Listen("127.0.0.1:0", p)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxyURL, _ := url.Parse("http://" + srv.Addr())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	for _, m := range []string{"PUT", "POST", "DELETE", "PATCH", "TRACE", "OPTIONS"} {
		req, _ := http.NewRequest(m, index.URL+"/evil-package", strings.NewReader(`{"name":"evil"}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "aXg6") {
			t.Errorf("%s through the proxy: %d %s, want 405", m, resp.StatusCode, b)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Errorf("the index got %v, want nothing", seen)
	}
	mu.Unlock()
	for _, m := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(m, index.URL+"/packages/x-1.0.tgz", nil) // outside any /simple/ path
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", m, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET Basic aXg6czNjcmV0", "HEAD Basic aXg6czNjcmV0"}; !slices.Equal(seen, want) {
		t.Errorf("the index got %v, want %v", seen, want)
	}
}

// One source cannot hold more than DefaultPerSourceMax connections, and an idle tunnel ends.
func TestProxyBoundsConnections(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	p, err := indexproxy.New(nil, []string{upstream.Addr().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.TunnelIdle = 2 * time.Second // longer than opening the tunnels below takes
	srv, err := indexproxy.Listen("127.0.0.1:0", p)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	tunnel := func() (net.Conn, error) {
		c, err := net.Dial("tcp", srv.Addr())
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", upstream.Addr(), upstream.Addr())
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		if resp.StatusCode != 200 {
			c.Close()
			return nil, fmt.Errorf("CONNECT: %d", resp.StatusCode)
		}
		c.SetReadDeadline(time.Time{})
		return c, nil
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range indexproxy.DefaultPerSourceMax {
		c, err := tunnel()
		if err != nil {
			t.Fatalf("tunnel %d: %v", len(held), err)
		}
		held = append(held, c)
	}
	if c, err := tunnel(); err == nil {
		c.Close()
		t.Errorf("tunnel %d opened, want the source capped at %d", len(held)+1, indexproxy.DefaultPerSourceMax)
	}
	// Idle for longer than TunnelIdle: the proxy closes the tunnels, and the source may connect again.
	held[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an idle tunnel still open after 10 s: %v", err)
	}
	// The slot is released before the tunnel's connection is closed: the EOF above means it is free.
	c, err := tunnel()
	if err != nil {
		t.Fatalf("no tunnel after an idle one ended: %v", err)
	}
	c.Close()
}

// An index that stops sending mid-answer does not hold the proxy's goroutine and connections:
// the answer ends after TunnelIdle.
func TestProxyEndsAStalledAnswer(t *testing.T) {
	release := make(chan struct{})
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-release
	}))
	defer index.Close()
	defer close(release)
	p, err := indexproxy.New([]string{index.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.TunnelIdle = 300 * time.Millisecond
	srv, err := indexproxy.Listen("127.0.0.1:0", p)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxyURL, _ := url.Parse("http://" + srv.Addr())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	resp, err := c.Get(index.URL + "/simple/x/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	b, err := io.ReadAll(resp.Body)
	if string(b) != "partial" || errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("read %q, %v after %v; want the partial answer ended by the proxy within moments", b, err, time.Since(start))
	}
}
