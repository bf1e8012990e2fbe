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
)

// Shutdown lets an in-flight invocation finish and refuses new connections.
func TestServeGracefulShutdown(t *testing.T) {
	e := newEnv(t)
	e.ensure()
	e.function("slow")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "done")
	}))
	defer up.Close()
	e.ready("slow", up.URL)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, api.NewHTTPServer("", e.srv.Handler(), nil), ln, 5*time.Second) }()
	url := "http://" + ln.Addr().String()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(url + "/fn/" + e.ns + "/slow")
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	time.Sleep(150 * time.Millisecond)
	cancel()
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
