package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apitest"
)

// waitClosed waits until addr refuses connections.
func waitClosed(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still accepts connections after shutdown began", addr)
}

// Shutdown lets an in-flight invocation finish and refuses new connections.
func TestServeGracefulShutdown(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	e.Function("slow")
	arrived, finish := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-finish
		io.WriteString(w, "done")
	}))
	defer up.Close()
	e.Ready("slow", up.URL)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, api.NewHTTPServer("", e.Srv.Handler(), nil), ln, 5*time.Second) }()
	url := "http://" + ln.Addr().String()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(url + "/fn/" + e.NS + "/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-arrived // the invocation is in flight
	cancel()
	// Shutdown has closed the listener once Serve stops accepting; the invocation is still open.
	waitClosed(t, ln.Addr().String())
	close(finish)
	if b := <-got; b != "done" {
		t.Fatalf("in-flight request: %q", b)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("a new request was served after shutdown")
	}
}

// An unauthenticated upload whose body trickles in is answered 401 at once and its connection
// closed, instead of being read (up to the 15-minute upload timeout) first.
func TestSlowBodyBefore401(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go api.Serve(ctx, api.NewHTTPServer("", e.Srv.Handler(), nil), ln, time.Second)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/namespaces/%s/functions/f/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/zip\r\nContent-Length: 10000000\r\n\r\nPK\x03\x04", e.NS)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 5 s while the body trickles: %v", err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("%d, close %v; want 401 and Connection: close", resp.StatusCode, resp.Close)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the connection stayed open")
	}
	t.Logf("401 after %v", time.Since(start).Round(time.Millisecond))
}
