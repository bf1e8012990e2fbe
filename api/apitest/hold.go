package apitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// testConcurrencyAndHolding: /fn/ never sends an instance more than its concurrency; the rest
// wait (held), up to the bound, beyond which it answers 429 throttled with Retry-After; a held
// request waits at most the function's timeout (504).
func testConcurrencyAndHolding(t *testing.T, bk Backend) {
	e := NewEnv(t, bk, api.WithMaxHeld(1))
	e.Ensure()
	ctx := context.Background()
	if _, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "one", Runtime: "python3.11", Concurrency: 1, TimeoutSec: 1}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, peak := 0, 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		if r.URL.Path == "/block" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		io.WriteString(w, "done")
	}))
	t.Cleanup(up.Close)
	e.Ready("one", up.URL)
	path := "/fn/" + e.NS + "/one"

	type result struct {
		code int
		body string
	}
	send := func(p string) chan result {
		ch := make(chan result, 1)
		go func() {
			resp, err := http.Get(e.URL + path + p)
			if err != nil {
				ch <- result{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- result{resp.StatusCode, string(b)}
		}()
		return ch
	}
	held := func(n int) {
		t.Helper()
		if !waitFor(5*time.Second, func() bool {
			for _, l := range e.Srv.Activator().Loads() {
				if l.Name == "one" && l.Held == n {
					return true
				}
			}
			return false
		}) {
			t.Fatalf("never %d held", n)
		}
	}
	first := send("/block")
	if !waitFor(5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return inFlight == 1 }) {
		t.Fatal("the first request never reached the function")
	}
	second := send("/")
	held(1)
	resp, err := http.Get(e.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), apiv1.CodeThrottled) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("beyond the hold queue: %d %q Retry-After %q", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	fnAnswered(t, e, http.StatusTooManyRequests, 1) // handed to the store before the two below, if at all
	close(release)
	if r := <-first; r.code != 200 {
		t.Errorf("first: %+v", r)
	}
	if r := <-second; r.code != 200 || r.body != "done" {
		t.Errorf("held: %+v", r)
	}
	// Only the requests an instance was given are recorded: not the refused one (/fn/ is public;
	// refusals cost nothing to cause).
	var inv []apiv1.Invocation
	waitFor(10*time.Second, func() bool { inv, _ = e.C.Invocations(ctx, "one"); return len(inv) >= 2 })
	if len(inv) != 2 || inv[0].Status != 200 || inv[1].Status != 200 {
		t.Errorf("records %+v, want the two requests served (200), not the 429", inv)
	}
	mu.Lock()
	if peak != 1 {
		t.Errorf("%d requests in flight at once on an instance of concurrency 1", peak)
	}
	mu.Unlock()

	// Held past the function's timeout (1 s, +1 s): 504.
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	busy := send("/")
	start := time.Now()
	waiting := send("/")
	r := <-waiting
	if r.code != http.StatusGatewayTimeout || !strings.Contains(r.body, apiv1.CodeUpstreamTimeout) {
		t.Errorf("held past the timeout: %+v after %v", r, time.Since(start))
	}
	<-busy
}
