package api_test

import (
	"context"
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
