package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/codestore"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/internal/testenv"
)

// seen is what the upstream function received.
type seen struct {
	Path, RawQuery string
	Header         http.Header
	Body           string
}

func echoUpstream(t *testing.T) (*httptest.Server, chan seen) {
	ch := make(chan seen, 16)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(b)}
		w.Header().Set("X-From", "function")
		io.WriteString(w, "hello")
	}))
	t.Cleanup(s.Close)
	return s, ch
}

func TestProxyHeadersAndPaths(t *testing.T) { eachBackend(t, testProxyHeadersAndPaths) }

func testProxyHeadersAndPaths(t *testing.T, backend string) {
	e := newEnvOn(t, backend)
	e.ensure()
	e.function("echo")
	up, ch := echoUpstream(t)
	e.ready("echo", up.URL)

	req, _ := http.NewRequest("POST", e.url+"/fn/"+e.ns+"/echo/orders/7?x=1&y=%2F", strings.NewReader("payload"))
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("Forwarded", "for=6.6.6.6")
	req.Header.Set("Authorization", "Bearer secret-platform-token")
	req.Header.Set("Cookie", "session=abc")
	req.Header.Set("X-Request-Id", "req-123")
	req.Header.Set("X-Custom", "kept")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello" || resp.Header.Get("X-From") != "function" || resp.Header.Get("X-Request-Id") != "req-123" {
		t.Fatalf("%d %q %v", resp.StatusCode, b, resp.Header)
	}
	got := <-ch
	if got.Path != "/orders/7" || got.RawQuery != "x=1&y=%2F" || got.Body != "payload" {
		t.Errorf("upstream saw %s ? %s body %q", got.Path, got.RawQuery, got.Body)
	}
	if xff := got.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %v: the spoofed value must be replaced", xff)
	}
	if got.Header.Get("Forwarded") != "" {
		t.Errorf("Forwarded passed through: %q", got.Header.Get("Forwarded"))
	}
	if got.Header.Get("Authorization") != "" || got.Header.Get("Cookie") != "" {
		t.Errorf("credentials forwarded: %q %q", got.Header.Get("Authorization"), got.Header.Get("Cookie"))
	}
	if got.Header.Get("X-Custom") != "kept" || got.Header.Get("X-Request-Id") != "req-123" ||
		got.Header.Get("X-Forwarded-Prefix") != "/fn/"+e.ns+"/echo" {
		t.Errorf("headers %v", got.Header)
	}

	// A longer name is another function, not a sub-path.
	if code, ecode, _ := e.raw("GET", "/fn/"+e.ns+"/echoes", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("/fn/…/echoes: %d %s", code, ecode)
	}
}

func TestProxyErrors(t *testing.T) { eachBackend(t, testProxyErrors) }

func testProxyErrors(t *testing.T, backend string) {
	e := newEnvOn(t, backend, api.WithProxyBodyLimit(1024), api.WithProxyDialRetry(300*time.Millisecond))
	e.ensure()
	ctx := context.Background()

	if code, ecode, _ := e.raw("GET", "/fn/"+e.ns+"/ghost", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("unknown: %d %s", code, ecode)
	}
	if code, ecode, _ := e.raw("GET", "/fn/sless-0000000000000000/ghost/x", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("unknown namespace: %d %s", code, ecode)
	}
	// Unknown names leave no records (the route is public; records are bounded per real function).
	if inv, _ := e.srv.Invocations().List(ctx, e.ns, "ghost", 10); len(inv) != 0 {
		t.Errorf("records for an unknown function: %v", inv)
	}

	e.function("pending")
	if code, ecode, b := e.raw("GET", "/fn/"+e.ns+"/pending", "", "", nil); code != 503 || ecode != apiv1.CodeNotReady || !strings.Contains(string(b), "pending") {
		t.Errorf("not ready: %d %s %s", code, ecode, b)
	}

	// Ready in the store, but the backend has no instance.
	e.function("starting")
	e.be.Functions.Update(ctx, e.ns, "starting", func(f *apiv1.Function) error { f.Status.Phase = apiv1.PhaseReady; return nil })
	if code, ecode, _ := e.raw("GET", "/fn/"+e.ns+"/starting", "", "", nil); code != 503 || ecode != apiv1.CodeNotReady {
		t.Errorf("no instance: %d %s", code, ecode)
	}

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer hang.Close()
	f, _ := e.c.CreateFunction(ctx, apiv1.Function{Name: "hang", Runtime: "python3.11", TimeoutSec: 1})
	_ = f
	e.ready("hang", hang.URL)
	start := time.Now()
	if code, ecode, _ := e.raw("GET", "/fn/"+e.ns+"/hang", "", "", nil); code != 504 || ecode != apiv1.CodeUpstreamTimeout {
		t.Errorf("hang: %d %s", code, ecode)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("504 after %v for timeout_sec=1", d)
	}

	var resetHits atomic.Int64
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resetHits.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer reset.Close()
	e.function("reset")
	e.ready("reset", reset.URL)
	if code, ecode, _ := e.raw("POST", "/fn/"+e.ns+"/reset", "", "text/plain", []byte("once")); code != 502 || ecode != apiv1.CodeUpstreamError {
		t.Errorf("reset: %d %s", code, ecode)
	}
	// It reached the function: never sent again (only connections that could not be made are).
	if n := resetHits.Load(); n != 1 {
		t.Errorf("a request the function received was sent %d times", n)
	}
	e.function("down")
	e.ready("down", "http://127.0.0.1:1")
	start = time.Now()
	if code, ecode, _ := e.raw("GET", "/fn/"+e.ns+"/down", "", "", nil); code != 502 || ecode != apiv1.CodeUpstreamError {
		t.Errorf("connection refused: %d %s", code, ecode)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("connection refused answered after %v with a 300 ms dial retry", d)
	}

	up, _ := echoUpstream(t)
	e.function("small")
	e.ready("small", up.URL)
	if code, ecode, _ := e.raw("POST", "/fn/"+e.ns+"/small", "", "text/plain", bytes.Repeat([]byte("x"), 2048)); code != 413 || ecode != apiv1.CodePayloadTooLarge {
		t.Errorf("oversize body: %d %s", code, ecode)
	}

	inv, _ := e.c.Invocations(ctx, "hang")
	if len(inv) != 1 || inv[0].Status != 504 || inv[0].DurationMS < 900 {
		t.Errorf("hang invocations %+v", inv)
	}
	if inv, _ := e.c.Invocations(ctx, "reset"); len(inv) != 1 || inv[0].Status != 502 {
		t.Errorf("reset invocations %+v", inv)
	}
}

// DESIGN.md §5: reachable whether or not it has a trigger; 503 when it has http triggers and none
// is enabled; enabling one brings it back.
func TestProxyTriggerRule(t *testing.T) { eachBackend(t, testProxyTriggerRule) }

func testProxyTriggerRule(t *testing.T, backend string) {
	e := newEnvOn(t, backend)
	e.ensure()
	ctx := context.Background()
	e.function("web")
	up, _ := echoUpstream(t)
	e.ready("web", up.URL)
	get := func() (int, string, string) {
		code, ecode, b := e.raw("GET", "/fn/"+e.ns+"/web", "", "", nil)
		return code, ecode, string(b)
	}
	if code, _, _ := get(); code != 200 {
		t.Fatalf("without triggers: %d", code)
	}
	no := false
	e.c.CreateTrigger(ctx, apiv1.Trigger{Name: "cron-only", Type: "cron", FunctionRef: "web", Schedule: "*/5 * * * *", Enabled: &no})
	if code, _, _ := get(); code != 200 {
		t.Errorf("a disabled cron trigger must not stop http: %d", code)
	}
	e.c.CreateTrigger(ctx, apiv1.Trigger{Name: "public", Type: "http", FunctionRef: "web", Enabled: &no})
	if code, ecode, b := get(); code != 503 || ecode != apiv1.CodeNotReady || !strings.Contains(b, "disabled by trigger public") {
		t.Errorf("disabled: %d %s %s", code, ecode, b)
	}
	e.c.SetTriggerEnabled(ctx, "public", true)
	if code, _, _ := get(); code != 200 {
		t.Errorf("enabled again: %d", code)
	}
}

func TestProxyStreams(t *testing.T) { eachBackend(t, testProxyStreams) }

func testProxyStreams(t *testing.T, backend string) {
	e := newEnvOn(t, backend)
	e.ensure()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: two\n\n")
	}))
	defer up.Close()
	e.function("stream")
	e.ready("stream", up.URL)
	resp, err := http.Get(e.url + "/fn/" + e.ns + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "data: one\n" {
		t.Fatalf("first piece %q %v: it must arrive before the function finishes", first, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest %q", rest)
	}
}

func TestErrorEnvelopeEverywhere(t *testing.T) { eachBackend(t, testErrorEnvelopeEverywhere) }

func testErrorEnvelopeEverywhere(t *testing.T, backend string) {
	e := newEnvOn(t, backend)
	for _, p := range []struct{ method, path string }{{"GET", "/nope"}, {"PUT", "/healthz"}, {"GET", "/v1/namespaces/x/functions"}} {
		code, _, b := e.raw(p.method, p.path, "", "", nil)
		var env apiv1.ErrorBody
		if err := json.Unmarshal(b, &env); err != nil || env.Error.Code == "" || env.Error.Message == "" || code < 400 {
			t.Errorf("%s %s: %d %s", p.method, p.path, code, b)
		}
	}
}

// A function whose address does not accept connections yet (kube-proxy lags a pod's readiness; a
// rollout just replaced it) gets the request once it does: nothing was sent, so even a POST with a
// body is retried, and it arrives whole.
func TestProxyRetriesUntilTheFunctionListens(t *testing.T) {
	e := newEnv(t)
	e.ensure()
	port := testenv.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	e.function("late")
	e.ready("late", "http://"+addr)
	got := make(chan string, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			got <- "listen: " + err.Error()
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- r.Method + " " + string(b)
			io.WriteString(w, "late but there")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}()
	code, _, body := e.raw("POST", "/fn/"+e.ns+"/late", "", "text/plain", []byte("the whole body"))
	if code != 200 || string(body) != "late but there" {
		t.Fatalf("%d %s", code, body)
	}
	if g := <-got; g != "POST the whole body" {
		t.Errorf("the function got %q", g)
	}
}

// An instance that cannot be reached is resolved again on each retry: a rollout replaced it and
// the request goes to the new one.
func TestProxyRetryResolvesAgain(t *testing.T) {
	e := newEnv(t)
	e.ensure()
	e.function("moved")
	e.ready("moved", fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))
	up, _ := echoUpstream(t)
	go func() {
		time.Sleep(200 * time.Millisecond)
		e.resolver.set(e.ns, "moved", up.URL)
	}()
	if code, _, body := e.raw("POST", "/fn/"+e.ns+"/moved", "", "text/plain", []byte("hello")); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
}

// With a serving view (the Kubernetes backend's cache), /fn/ reads functions and triggers from it,
// not from the stores the REST routes use.
func TestProxyReadsTheServingView(t *testing.T) {
	code, _ := codestore.NewDir(t.TempDir())
	res := &resolver{m: map[string]*url.URL{}}
	backend, _ := memstore.Backend(code, res)
	view, _ := memstore.Backend(code, res)
	backend.Serving = &api.ServingView{Functions: view.Functions, Triggers: view.Triggers}
	v, _ := auth.New(auth.WithHS256Secret(testSecret))
	srv, err := api.New(backend, api.WithVerifier(v), api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	up, _ := echoUpstream(t)
	ns := "sless-00000000000000f1"
	res.set(ns, "seen", up.URL)
	view.Functions.Create(context.Background(), ns, apiv1.Function{Name: "seen", Runtime: "python3.11", Status: apiv1.FunctionStatus{Phase: apiv1.PhaseReady}})
	if resp, err := http.Get(hs.URL + "/fn/" + ns + "/seen"); err != nil || resp.StatusCode != 200 {
		t.Errorf("a function in the serving view only: %v %v", resp, err)
	}
	backend.Functions.Create(context.Background(), ns, apiv1.Function{Name: "stored", Runtime: "python3.11", Status: apiv1.FunctionStatus{Phase: apiv1.PhaseReady}})
	res.set(ns, "stored", up.URL)
	if resp, err := http.Get(hs.URL + "/fn/" + ns + "/stored"); err != nil || resp.StatusCode != 404 {
		t.Errorf("a function not (yet) in the serving view: %v %v, want 404", resp, err)
	}
}
