package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/objects"
)

// withAsync is bk with an in-memory queue where the backend keeps none of its own (its durable
// queue, if any, passes asynctest in its own package).
func withAsync(bk Backend) Backend {
	out := bk
	out.New = func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, Controller) {
		b, c := bk.New(t, code, r)
		if b.Async == nil {
			b.Async = async.NewMemQueue(nil)
		}
		return b, c
	}
	return out
}

// asyncCall sends a request to /fn/ asking for an asynchronous invocation.
func asyncCall(t *testing.T, url, body string, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get(apiv1.HeaderInvocationType) == "" {
		req.Header.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// waitAsync polls an invocation until cond holds.
func waitAsync(t *testing.T, c *client.Client, name, id string, cond func(*apiv1.AsyncInvocation) bool, what string) *apiv1.AsyncInvocation {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		inv, err := c.GetAsync(context.Background(), name, id)
		if err == nil && cond(inv) {
			return inv
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s: %+v %v", what, inv, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Asynchronous invocation through /fn/: opt-in per function (400 otherwise), stored and answered
// 202 with an id and a status URL; delivered through the event sources' entry (the function sees
// the invocation id, source and attempt, and the request as sent: method, path, query, headers,
// body); a 5xx retried up to max_retries, then dead-lettered with its error and a Warning event;
// the function's 4xx dead-lettered at once; listed and redriven; the depth quota answers 429;
// another tenant reads and redrives nothing; a deleted function's events go with it.
func testAsyncInvocation(t *testing.T, bk Backend) {
	e := NewEnv(t, withAsync(bk))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Srv.RunAsync(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e.Ensure()
	bg := context.Background()

	type call struct {
		method, path, body string
		header             http.Header
	}
	calls := make(chan call, 64)
	var mu sync.Mutex
	fail := map[string]int{} // body → answers of 500 left
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- call{r.Method, r.URL.RequestURI(), string(b), r.Header.Clone()}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case string(b) == "bad":
			w.WriteHeader(http.StatusUnprocessableEntity)
		case fail[string(b)] > 0:
			fail[string(b)]--
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(up.Close)

	// Not enabled: 400, and nothing reaches the function.
	e.Function("sync")
	e.Ready("sync", up.URL)
	if code, h, b := asyncCall(t, e.URL+"/fn/"+e.NS+"/sync", "x", nil); code != 400 || h.Get(apiv1.HeaderError) != apiv1.CodeInvalidArgument {
		t.Errorf("async call of a function without async: %d %s", code, b)
	}
	retries := 1
	f, err := e.C.CreateFunction(bg, apiv1.Function{Name: "jobs", Runtime: "python3.11", Async: &apiv1.AsyncConfig{Enabled: true, MaxRetries: &retries, MaxQueued: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if a := f.Async; a == nil || !a.Enabled || *a.MaxRetries != 1 || a.MaxAgeSec != apiv1.DefaultAsyncMaxAgeSec || a.MaxQueued != 3 {
		t.Fatalf("async as stored: %+v", f.Async)
	}
	e.Ready("jobs", up.URL)
	fnURL := e.URL + "/fn/" + e.NS + "/jobs"

	// Bad input: an unknown invocation type, a body beyond the async bound.
	if code, _, b := asyncCall(t, fnURL, "x", http.Header{apiv1.HeaderInvocationType: {"Later"}}); code != 400 {
		t.Errorf("invocation type Later: %d %s", code, b)
	}
	if code, _, b := asyncCall(t, fnURL, strings.Repeat("x", apiv1.MaxAsyncBodyBytes+1), nil); code != 413 {
		t.Errorf("an async body over %d bytes: %d %s", apiv1.MaxAsyncBodyBytes, code, b)
	}
	select {
	case c := <-calls:
		t.Fatalf("a refused async request reached the function: %+v", c)
	default:
	}

	// Accepted, delivered as sent.
	mu.Lock()
	fail["flaky"] = 1
	mu.Unlock()
	code, h, b := asyncCall(t, fnURL+"/orders/7?x=1", "flaky", http.Header{"Content-Type": {"text/plain"}, "X-Custom": {"v"}})
	if code != 202 {
		t.Fatalf("async call: %d %s", code, b)
	}
	var acc apiv1.AsyncAccepted
	if err := json.Unmarshal(b, &acc); err != nil || apiv1.ValidAsyncID(acc.ID) != nil || !strings.HasSuffix(acc.StatusURL, "/v1/namespaces/"+e.NS+"/functions/jobs/async/"+acc.ID) ||
		h.Get("Location") != acc.StatusURL {
		t.Fatalf("202 body %s, Location %q", b, h.Get("Location"))
	}
	for attempt := 1; attempt <= 2; attempt++ {
		select {
		case c := <-calls:
			if c.method != http.MethodPost || c.path != "/orders/7?x=1" || c.body != "flaky" || c.header.Get("Content-Type") != "text/plain" || c.header.Get("X-Custom") != "v" ||
				c.header.Get(apiv1.HeaderEventSource) != apiv1.SourceAsync || c.header.Get(apiv1.HeaderEventMessageID) != acc.ID ||
				c.header.Get(apiv1.HeaderEventDeliveryCount) != string(rune('0'+attempt)) || c.header.Get(apiv1.HeaderInvocationType) != "" {
				t.Errorf("attempt %d reached the function as %+v", attempt, c)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d never reached the function", attempt)
		}
	}
	inv := waitAsync(t, e.C, "jobs", acc.ID, func(i *apiv1.AsyncInvocation) bool { return i.State == apiv1.AsyncSucceeded }, "the flaky invocation succeeded")
	if len(inv.Attempts) != 2 || inv.Attempts[0].Status != 500 || inv.Attempts[0].Error == "" || inv.Attempts[1].Status != 200 {
		t.Errorf("attempts %+v", inv.Attempts)
	}
	invs, err := e.Be.Invocations.List(bg, e.NS, "jobs", objects.InvocationQuery{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, i := range invs {
		if i.Source == apiv1.SourceAsync && i.MessageID == acc.ID {
			recorded++
		}
	}
	if recorded != 2 {
		t.Errorf("%d invocation records of source async for %s, want 2: %+v", recorded, acc.ID, invs)
	}

	// Retries used up: dead-lettered with the last error; the function's own 4xx at once.
	mu.Lock()
	fail["poison"] = 100
	mu.Unlock()
	_, _, b = asyncCall(t, fnURL, "poison", nil)
	var poison, bad apiv1.AsyncAccepted
	json.Unmarshal(b, &poison)
	_, _, b = asyncCall(t, fnURL, "bad", nil)
	json.Unmarshal(b, &bad)
	pi := waitAsync(t, e.C, "jobs", poison.ID, func(i *apiv1.AsyncInvocation) bool { return i.State == apiv1.AsyncDeadLettered }, "the poison invocation dead-lettered")
	if len(pi.Attempts) != 2 || !strings.Contains(pi.Error, "500") {
		t.Errorf("poison: %+v", pi)
	}
	bi := waitAsync(t, e.C, "jobs", bad.ID, func(i *apiv1.AsyncInvocation) bool { return i.State == apiv1.AsyncDeadLettered }, "the refused invocation dead-lettered")
	if len(bi.Attempts) != 1 || !strings.Contains(bi.Error, "422") {
		t.Errorf("bad: %+v", bi)
	}
	dl, err := e.C.ListDeadLetters(bg, "jobs", 0)
	if err != nil || len(dl) != 2 || dl[0].ID != bad.ID || dl[1].ID != poison.ID {
		t.Fatalf("dead letters %+v %v", dl, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, _ := e.C.ListEvents(bg, "jobs")
		n := 0
		for _, ev := range evs {
			if ev.Reason == apiv1.ReasonDeadLettered && ev.Type == apiv1.EventWarning {
				n++
			}
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events, want 2: %+v", n, apiv1.ReasonDeadLettered, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Another tenant: its own namespace has no such function; ours is not its to read.
	other := e.Tenant()
	other.Ensure()
	if _, err := other.C.GetAsync(bg, "jobs", poison.ID); !client.IsNotFound(err) {
		t.Errorf("another tenant read an invocation: %v", err)
	}
	for _, path := range []string{"/functions/jobs/async/" + poison.ID, "/functions/jobs/dead-letters"} {
		if code, _, _ := other.Raw(http.MethodGet, "/v1/namespaces/"+e.NS+path, other.Token, "", nil); code != 404 && code != 403 {
			t.Errorf("another tenant's GET %s: %d", path, code)
		}
	}
	if code, _, _ := other.Raw(http.MethodPost, "/v1/namespaces/"+e.NS+"/functions/jobs/dead-letters/"+poison.ID+"/redrive", other.Token, "", nil); code != 404 && code != 403 {
		t.Errorf("another tenant's redrive: %d", code)
	}
	// An id of another function of ours is not found under this one; bad ids are refused.
	if _, err := e.C.GetAsync(bg, "sync", poison.ID); !client.IsNotFound(err) {
		t.Errorf("an invocation read under another function: %v", err)
	}
	for _, id := range []string{"../../x", "ZZZZ", strings.Repeat("a", 33)} {
		if code, _, _ := e.Raw(http.MethodGet, "/v1/namespaces/"+e.NS+"/functions/jobs/async/"+id, e.Token, "", nil); code != 400 && code != 404 {
			t.Errorf("id %q: %d", id, code)
		}
	}

	// Redrive: the poison invocation is tried again (and succeeds now); a second redrive of it is
	// a conflict.
	mu.Lock()
	fail["poison"] = 0
	mu.Unlock()
	if _, err := e.C.Redrive(bg, "jobs", poison.ID); err != nil {
		t.Fatal(err)
	}
	ri := waitAsync(t, e.C, "jobs", poison.ID, func(i *apiv1.AsyncInvocation) bool { return i.State == apiv1.AsyncSucceeded }, "the redriven invocation succeeded")
	if len(ri.Attempts) != 3 || ri.Redriven == nil {
		t.Errorf("redriven: %+v", ri)
	}
	if _, err := e.C.Redrive(bg, "jobs", poison.ID); !isStatus(err, 409) {
		t.Errorf("redrive of a succeeded invocation: %v", err)
	}

	// The depth quota (max_queued 3): the function is held from serving (no instance), so events
	// pile up; the fourth is 429.
	e.Resolver.Unset(e.NS, "jobs")
	for i := range 4 {
		code, h, b := asyncCall(t, fnURL, "held", nil)
		if i < 3 && code != 202 {
			t.Fatalf("held call %d: %d %s", i, code, b)
		}
		if i == 3 && (code != 429 || h.Get("Retry-After") == "" || h.Get(apiv1.HeaderError) != apiv1.CodeThrottled) {
			t.Errorf("a call beyond max_queued: %d %s", code, b)
		}
	}

	// Deleted: its invocations go with it.
	if err := e.C.DeleteFunction(bg, "jobs"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Be.Async.Get(bg, e.NS, "jobs", poison.ID); err == nil {
		t.Error("a deleted function's invocation is still kept")
	}
	st, _ := e.Be.Async.Stats(bg)
	for _, s := range st {
		if s.Namespace == e.NS && s.Function == "jobs" {
			t.Errorf("a deleted function's queue: %+v", s)
		}
	}
}

// An install without a queue refuses async.enabled rather than accepting events it cannot keep.
func testAsyncNeedsAQueue(t *testing.T, bk Backend) {
	noQueue := bk
	noQueue.New = func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, Controller) {
		b, c := bk.New(t, code, r)
		b.Async = nil
		return b, c
	}
	e := NewEnv(t, noQueue)
	e.Ensure()
	_, err := e.C.CreateFunction(context.Background(), apiv1.Function{Name: "f", Runtime: "python3.11", Async: &apiv1.AsyncConfig{Enabled: true}})
	if ae, ok := errors.AsType[*apiv1.Error](err); !ok || ae.Status != 400 || !strings.Contains(ae.Message, "asynchronous") {
		t.Fatalf("async.enabled without a queue: %v", err)
	}
	if _, err := e.C.GetFunction(context.Background(), "f"); !client.IsNotFound(err) {
		t.Errorf("the refused function was stored: %v", err)
	}
	for _, bad := range []string{`{"enabled":true,"max_retries":-1}`, `{"enabled":true,"max_retries":11}`, `{"enabled":true,"max_age_sec":59}`,
		`{"enabled":true,"max_age_sec":21601}`, `{"enabled":true,"max_queued":-1}`, `{"enabled":true,"max_queued":100001}`, `{"enabled":"yes"}`} {
		body := []byte(`{"name":"g","runtime":"python3.11","async":` + bad + `}`)
		if code, errCode, b := e.Raw(http.MethodPost, "/v1/namespaces/"+e.NS+"/functions", e.Token, "application/json", body); code != 400 {
			t.Errorf("async %s: %d %s %s", bad, code, errCode, bytes.TrimSpace(b))
		}
	}
}

// isStatus reports whether err is the API's error with status code.
func isStatus(err error, code int) bool {
	ae, ok := errors.AsType[*apiv1.Error](err)
	return ok && ae.Status == code
}
