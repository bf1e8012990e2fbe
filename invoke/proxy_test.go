package invoke_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sless-dev/sless/invoke"
	"github.com/sless-dev/sless/objects"
)

// fixed serves one function, f in namespace ns, from an upstream URL.
type fixed struct{ upstream *url.URL }

func (fixed) Get(_ context.Context, ns, name string) (objects.Function, error) {
	if ns != "ns" || name != "f" {
		return objects.Function{}, objects.ErrNotFound
	}
	return objects.Function{Spec: objects.FunctionSpec{Name: "f", Runtime: "python3.11", TimeoutSec: 30}}, nil
}

func (fixed) List(context.Context, string) ([]objects.Trigger, error) { return nil, nil }

func (f fixed) Resolve(context.Context, string, string) (*url.URL, error) { return f.upstream, nil }

// proxyTo is /fn/ (a real HTTP server, as in the API) in front of upstream, and where it records.
func proxyTo(t *testing.T, upstream http.Handler) (string, *objects.InvocationRing) {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	f := fixed{u}
	inv := objects.NewInvocationRing(10)
	p := invoke.New(objects.Backend{Serving: &objects.ServingView{Functions: f, Triggers: f}, Resolver: f, Invocations: inv})
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return front.URL + "/fn/ns/f", inv
}

// A streamed answer (chunked, or server-sent events) reaches the client chunk by chunk: the
// upstream writes its second chunk only once the client has read the first through /fn/, so a
// proxy that buffered would never deliver it. The invocation is recorded when the stream ends,
// with its whole duration.
func TestStreamedResponseIsForwardedChunkByChunk(t *testing.T) {
	for _, ctype := range []string{"text/plain; charset=utf-8", "text/event-stream", "application/x-ndjson"} {
		t.Run("content-type "+ctype, func(t *testing.T) {
			sawFirst := make(chan struct{})
			upstreamDone := make(chan struct{})
			fn, inv := proxyTo(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(upstreamDone)
				w.Header().Set("Content-Type", ctype)
				io.WriteString(w, "first\n")
				w.(http.Flusher).Flush()
				select {
				case <-sawFirst:
				case <-time.After(5 * time.Second):
				}
				time.Sleep(200 * time.Millisecond)
				io.WriteString(w, "second\n")
			}))
			start := time.Now()
			resp, err := http.Get(fn + "/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			firstAt := time.Since(start)
			if err != nil || first != "first\n" {
				t.Fatalf("first chunk %q, %v", first, err)
			}
			select {
			case <-upstreamDone:
				t.Fatal("the upstream finished before the client had its first chunk")
			default:
			}
			if n := len(list(inv)); n != 0 {
				t.Errorf("%d invocations recorded while the stream runs", n)
			}
			close(sawFirst)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "second\n" {
				t.Fatalf("rest %q, %v", rest, err)
			}
			t.Logf("first chunk through /fn/ after %v", firstAt)
			if firstAt > 2*time.Second {
				t.Errorf("first chunk after %v: held until the upstream's 5 s fallback", firstAt)
			}
			var l []invocation
			deadline := time.Now().Add(5 * time.Second)
			for len(l) == 0 && time.Now().Before(deadline) {
				l = list(inv)
				time.Sleep(10 * time.Millisecond)
			}
			if len(l) != 1 || l[0].status != 200 || l[0].ms < 200 {
				t.Errorf("recorded %+v, want one 200 lasting the whole stream (≥ 200 ms)", l)
			}
		})
	}
}

type invocation struct {
	status int
	ms     float64
}

func list(inv *objects.InvocationRing) []invocation {
	l, _ := inv.List(context.Background(), "ns", "f", objects.InvocationQuery{})
	var out []invocation
	for _, i := range l {
		out = append(out, invocation{i.Status, i.DurationMS})
	}
	return out
}

// A client that goes mid-stream: the function's request is cancelled (its connection closed), so
// a runtime learns it and closes the handler's generator.
func TestClientGoneMidStreamReachesTheFunction(t *testing.T) {
	gone := make(chan struct{})
	fn, _ := proxyTo(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
		}
	}))
	resp, err := http.Get(fn)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || first != "first\n" {
		t.Fatalf("first chunk %q, %v", first, err)
	}
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the function's request went on after the client left")
	}
}
