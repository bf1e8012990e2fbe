package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// Seen is what the upstream function received.
type Seen struct {
	Path, RawQuery string
	Header         http.Header
	Body           string
}

func EchoUpstream(t *testing.T) (*httptest.Server, chan Seen) {
	ch := make(chan Seen, 16)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- Seen{r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(b)}
		w.Header().Set("X-From", "function")
		io.WriteString(w, "hello")
	}))
	t.Cleanup(s.Close)
	return s, ch
}

func testProxyHeadersAndPaths(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("echo")
	up, ch := EchoUpstream(t)
	e.Ready("echo", up.URL)

	req, _ := http.NewRequest("POST", e.URL+"/fn/"+e.NS+"/echo/orders/7?x=1&y=%2F", strings.NewReader("payload"))
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
	if got.Header.Get("Authorization") != "" {
		t.Errorf("the platform's credentials forwarded: %q", got.Header.Get("Authorization"))
	}
	// On the origin every function shares, cookies are not passed (a function's own host gets them).
	if got.Header.Get("Cookie") != "" {
		t.Errorf("Cookie %q passed under /fn/", got.Header.Get("Cookie"))
	}
	if got.Header.Get("X-Custom") != "kept" || got.Header.Get("X-Request-Id") != "req-123" ||
		got.Header.Get("X-Forwarded-Prefix") != "/fn/"+e.NS+"/echo" {
		t.Errorf("headers %v", got.Header)
	}

	// A longer name is another function, not a sub-path.
	if code, ecode, _ := e.Raw("GET", "/fn/"+e.NS+"/echoes", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("/fn/…/echoes: %d %s", code, ecode)
	}
}

func testProxyErrors(t *testing.T, bk Backend) {
	e := NewEnv(t, bk, api.WithProxyBodyLimit(1024), api.WithProxyDialRetry(300*time.Millisecond))
	e.Ensure()
	ctx := context.Background()

	if code, ecode, _ := e.Raw("GET", "/fn/"+e.NS+"/ghost", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("unknown: %d %s", code, ecode)
	}
	if code, ecode, _ := e.Raw("GET", "/fn/sless-0000000000000000/ghost/x", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("unknown namespace: %d %s", code, ecode)
	}
	// Unknown names leave no records (the route is public; records are bounded per real function).
	if inv, _ := e.Srv.Invocations().List(ctx, e.NS, "ghost", objects.InvocationQuery{Limit: 10}); len(inv) != 0 {
		t.Errorf("records for an unknown function: %v", inv)
	}

	e.Function("pending")
	if code, ecode, b := e.Raw("GET", "/fn/"+e.NS+"/pending", "", "", nil); code != 503 || ecode != apiv1.CodeNotReady || !strings.Contains(string(b), "pending") {
		t.Errorf("not ready: %d %s %s", code, ecode, b)
	}

	// Ready in the store, but the backend has no instance.
	e.Function("starting")
	e.Ctrl.SetFunctionStatus(e.NS, "starting", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady })
	if code, ecode, _ := e.Raw("GET", "/fn/"+e.NS+"/starting", "", "", nil); code != 503 || ecode != apiv1.CodeNotReady {
		t.Errorf("no instance: %d %s", code, ecode)
	}

	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer hang.Close()
	f, _ := e.C.CreateFunction(ctx, apiv1.Function{Name: "hang", Runtime: "python3.11", TimeoutSec: 1})
	_ = f
	e.Ready("hang", hang.URL)
	start := time.Now()
	if code, ecode, _ := e.Raw("GET", "/fn/"+e.NS+"/hang", "", "", nil); code != 504 || ecode != apiv1.CodeUpstreamTimeout {
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
	e.Function("reset")
	e.Ready("reset", reset.URL)
	if code, ecode, body := e.Raw("POST", "/fn/"+e.NS+"/reset", "", "text/plain", []byte("once")); code != 502 || ecode != apiv1.CodeUpstreamError ||
		strings.Contains(string(body), strings.TrimPrefix(reset.URL, "http://")) || strings.Contains(string(body), "127.0.0.1") {
		t.Errorf("reset: %d %s %s (the 502 must not name the instance's address)", code, ecode, body)
	}
	// It reached the function: never sent again (only connections that could not be made are).
	if n := resetHits.Load(); n != 1 {
		t.Errorf("a request the function received was sent %d times", n)
	}
	e.Function("down")
	e.Ready("down", "http://127.0.0.1:1")
	start = time.Now()
	if code, ecode, body := e.Raw("GET", "/fn/"+e.NS+"/down", "", "", nil); code != 502 || ecode != apiv1.CodeUpstreamError || strings.Contains(string(body), "127.0.0.1") {
		t.Errorf("connection refused: %d %s %s", code, ecode, body)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("connection refused answered after %v with a 300 ms dial retry", d)
	}

	up, _ := EchoUpstream(t)
	e.Function("small")
	e.Ready("small", up.URL)
	if code, ecode, _ := e.Raw("POST", "/fn/"+e.NS+"/small", "", "text/plain", bytes.Repeat([]byte("x"), 2048)); code != 413 || ecode != apiv1.CodePayloadTooLarge {
		t.Errorf("oversize body: %d %s", code, ecode)
	}

	// A refusal before an instance was given the request (503 not ready, no instance) leaves no
	// record: once their handlers are done, the request "starting" serves when its instance is
	// there is its only record, and "pending" has none.
	fnAnswered(t, e, http.StatusServiceUnavailable, 2)
	e.Resolver.Set(e.NS, "starting", up.URL)
	if code, ecode, b := e.Raw("GET", "/fn/"+e.NS+"/starting", "", "", nil); code != 200 {
		t.Errorf("starting with an instance: %d %s %s", code, ecode, b)
	}
	var started []apiv1.Invocation
	waitFor(10*time.Second, func() bool { started, _ = e.C.Invocations(ctx, "starting"); return len(started) > 0 })
	if len(started) != 1 || started[0].Status != 200 {
		t.Errorf("starting's records %+v, want only the request its instance served", started)
	}
	if inv, err := e.C.Invocations(ctx, "pending"); err != nil || len(inv) != 0 {
		t.Errorf("pending's records %+v %v, want none", inv, err)
	}

	inv, _ := e.C.Invocations(ctx, "hang")
	if len(inv) != 1 || inv[0].Status != 504 || inv[0].DurationMS < 900 {
		t.Errorf("hang invocations %+v", inv)
	}
	if inv, _ := e.C.Invocations(ctx, "reset"); len(inv) != 1 || inv[0].Status != 502 {
		t.Errorf("reset invocations %+v", inv)
	}
}

func testProxyTriggerRule(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	ctx := context.Background()
	e.Function("web")
	up, _ := EchoUpstream(t)
	e.Ready("web", up.URL)
	get := func() (int, string, string) {
		code, ecode, b := e.Raw("GET", "/fn/"+e.NS+"/web", "", "", nil)
		return code, ecode, string(b)
	}
	if code, _, _ := get(); code != 200 {
		t.Fatalf("without triggers: %d", code)
	}
	no := false
	e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "cron-only", Type: "cron", FunctionRef: "web", Schedule: "*/5 * * * *", Enabled: &no})
	if code, _, _ := get(); code != 200 {
		t.Errorf("a disabled cron trigger must not stop http: %d", code)
	}
	e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "public", Type: "http", FunctionRef: "web", Enabled: &no})
	if code, ecode, b := get(); code != 503 || ecode != apiv1.CodeNotReady || !strings.Contains(b, "disabled by trigger public") {
		t.Errorf("disabled: %d %s %s", code, ecode, b)
	}
	e.C.SetTriggerEnabled(ctx, "public", true)
	if code, _, _ := get(); code != 200 {
		t.Errorf("enabled again: %d", code)
	}
}

func testProxyStreams(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: two\n\n")
	}))
	defer up.Close()
	e.Function("stream")
	e.Ready("stream", up.URL)
	resp, err := http.Get(e.URL + "/fn/" + e.NS + "/stream")
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

func testErrorEnvelopeEverywhere(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	for _, p := range []struct{ method, path string }{{"GET", "/nope"}, {"PUT", "/healthz"}, {"GET", "/v1/namespaces/x/functions"}} {
		code, _, b := e.Raw(p.method, p.path, "", "", nil)
		var env apiv1.ErrorBody
		if err := json.Unmarshal(b, &env); err != nil || env.Error.Code == "" || env.Error.Message == "" || code < 400 {
			t.Errorf("%s %s: %d %s", p.method, p.path, code, b)
		}
	}
}
