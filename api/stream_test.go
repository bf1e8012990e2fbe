package api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// streamEnv is the API (opts added) on a backend at zero whose one function, "sse", is served by
// fn once an instance has started; it returns the function's URL and where /fn/ records.
func streamEnv(t *testing.T, fn http.Handler, opts ...api.Option) (string, objects.Invocations) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != activator.HealthPath {
			fn.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	src := &scaleSource{up: u}
	code, _ := codestore.NewDir(t.TempDir())
	backend, stores := memstore.Backend(code, apitest.NewResolver())
	backend.Instances, backend.Scaler = src, src
	v, _ := auth.New(auth.WithHS256Secret(apitest.Secret))
	srv, err := api.New(backend, append([]api.Option{api.WithVerifier(v), api.WithTempDir(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ns := "sless-00000000000000c1"
	if _, err := backend.Functions.Create(context.Background(), ns, objects.FunctionSpec{Name: "sse", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	stores.Functions.SetStatus(ns, "sse", func(s *lifecycle.FunctionStatus) {
		s.Phase, s.Image = apiv1.PhaseReady, "registry/fn@sha256:x"
	})
	return hs.URL + "/fn/" + ns + "/sse", backend.Invocations
}

// A streamed answer through the API's whole /fn/ chain (request id, panic recovery, the request
// log and metrics, the activator holding a cold request, Server-Timing): the first chunk reaches
// the client while the function still runs — it writes its second chunk only once the client has
// the first, so any layer that buffered would hold the first until the function's fallback.
func TestColdStreamThroughTheAPI(t *testing.T) {
	sawFirst := make(chan struct{})
	fn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-sawFirst:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "data: second\n\n")
	})
	url, _ := streamEnv(t, fn)

	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got, _ := platformTimings(t, resp.Header); resp.StatusCode != 200 || got["sless-hold"] == 0 {
		t.Fatalf("%d, Server-Timing %q: want a held (cold) request", resp.StatusCode, resp.Header.Values("Server-Timing"))
	}
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() { line, _ := br.ReadString('\n'); got <- line }()
	select {
	case line := <-got:
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the first event did not come while the function ran")
	}
	close(sawFirst)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest %q, %v", rest, err)
	}
}

// A stream the function cuts off (an exception mid-stream: no terminating chunk) is cut off for
// the client too, and still gets its request log line, marked aborted, and its invocation record.
func TestAbortedStreamIsLoggedAndRecorded(t *testing.T) {
	var logs testenv.LockedBuffer
	url, inv := streamEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection closes without the terminating chunk
	}), api.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "first\n" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("body %q, %v: want the first chunk, then an incomplete body", b, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `"aborted":true`) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, `"route":"/fn/{ns}/{name}"`) || !strings.Contains(l, `"aborted":true`) {
		t.Errorf("no aborted /fn/ line in the request log:\n%s", l)
	}
	ns := strings.Split(url, "/")[4]
	if l, err := inv.List(context.Background(), ns, "sse", objects.InvocationQuery{}); err != nil || len(l) != 1 {
		t.Errorf("invocations %v, %v", l, err)
	}
}
