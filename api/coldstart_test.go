package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// scaleSource is a backend at zero that starts one instance when poked: listed without an
// address first, then with one, healthy a little later, the decision time reported.
type scaleSource struct {
	mu        sync.Mutex
	list      []activator.Instance
	up        *url.URL
	requested time.Time
	pokes     int
}

func (s *scaleSource) Instances(context.Context, string, string) ([]activator.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activator.Instance(nil), s.list...), nil
}

func (s *scaleSource) Poke(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pokes++
	if len(s.list) > 0 {
		return
	}
	s.requested = time.Now()
	s.list = []activator.Instance{{ID: "pod-1", Requested: s.requested}}
	go func() {
		time.Sleep(40 * time.Millisecond)
		s.mu.Lock()
		s.list = []activator.Instance{{ID: "pod-1", URL: s.up, Requested: s.requested}}
		s.mu.Unlock()
	}()
}

func (s *scaleSource) zero() { s.mu.Lock(); s.list = nil; s.mu.Unlock() }

type scaleEnv struct {
	url, ns string
	srv     *api.Server
	src     *scaleSource
	stores  *memstore.Stores
	healthy chan struct{} // closed: the instance answers /health
}

func newScaleEnv(t *testing.T, fnHeaders http.Header) *scaleEnv {
	t.Helper()
	healthy := make(chan struct{})
	var once sync.Once
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == activator.HealthPath {
			select {
			case <-healthy:
			default:
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		for k, v := range fnHeaders {
			w.Header()[k] = v
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(fn.Close)
	up, _ := url.Parse(fn.URL)
	src := &scaleSource{up: up}
	code, _ := codestore.NewDir(t.TempDir())
	backend, stores := memstore.Backend(code, apitest.NewResolver())
	backend.Instances, backend.Scaler = src, src
	v, _ := auth.New(auth.WithHS256Secret(apitest.Secret))
	srv, err := api.New(backend, api.WithVerifier(v), api.WithTempDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ns := "sless-00000000000000c0"
	if _, err := backend.Functions.Create(context.Background(), ns, objects.FunctionSpec{Name: "cold", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	stores.Functions.SetStatus(ns, "cold", func(s *lifecycle.FunctionStatus) {
		s.Phase, s.Image, s.Replicas, s.DesiredReplicas = apiv1.PhaseReady, "registry/fn@sha256:x", 0, 0
	})
	go func() { time.Sleep(120 * time.Millisecond); once.Do(func() { close(healthy) }) }()
	return &scaleEnv{url: hs.URL, ns: ns, srv: srv, src: src, stores: stores, healthy: healthy}
}

var timingEntry = regexp.MustCompile(`^(sless-[a-z]+);dur=([0-9]+\.[0-9])$`)

// platformTimings parses the sless-… entries of a response's Server-Timing; others are returned
// as they are.
func platformTimings(t *testing.T, h http.Header) (map[string]float64, []string) {
	t.Helper()
	got, other := map[string]float64{}, []string(nil)
	for _, v := range h.Values("Server-Timing") {
		for _, e := range splitOutsideQuotes(v) {
			if m := timingEntry.FindStringSubmatch(e); m != nil {
				if _, dup := got[m[1]]; dup {
					t.Errorf("%s twice in %q", m[1], h.Values("Server-Timing"))
				}
				got[m[1]], _ = strconv.ParseFloat(m[2], 64)
			} else {
				other = append(other, e)
			}
		}
	}
	return got, other
}

// splitOutsideQuotes splits a header list at the commas outside quoted strings.
func splitOutsideQuotes(v string) []string {
	var out []string
	quoted, from := false, 0
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '"' && (i == 0 || v[i-1] != '\\'):
			quoted = !quoted
		case v[i] == ',' && !quoted:
			out = append(out, strings.TrimSpace(v[from:i]))
			from = i + 1
		}
	}
	return append(out, strings.TrimSpace(v[from:]))
}

// A request held while an instance starts gets the platform's Server-Timing: hold, and for a cold
// start the backend's decision, the instance listed with an address and healthy, in order, each
// within the hold; a warm request gets none. A function's own sless-… entries are dropped (from
// held and warm responses alike), its other entries kept.
func TestServerTimingOfAColdRequest(t *testing.T) {
	hostile := http.Header{"Server-Timing": {`sless-hold;dur=1.0, app;dur=5;desc="a, sless-ready;dur=2"`, "SLESS-start;dur=0", "db;dur=3"}}
	e := newScaleEnv(t, hostile)
	start := time.Now()
	resp, err := http.Get(e.url + "/fn/" + e.ns + "/cold")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != 200 {
		t.Fatalf("cold request: %d", resp.StatusCode)
	}
	got, other := platformTimings(t, resp.Header)
	t.Logf("Server-Timing %q (client: %v)", resp.Header.Values("Server-Timing"), took)
	for _, k := range []string{"sless-hold", "sless-decision", "sless-start", "sless-ready"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s in %q", k, resp.Header.Values("Server-Timing"))
		}
	}
	if !(got["sless-decision"] <= got["sless-start"] && got["sless-start"] <= got["sless-ready"] && got["sless-ready"] <= got["sless-hold"]) {
		t.Errorf("parts out of order: %v", got)
	}
	if got["sless-start"] < 35 || got["sless-ready"] < 100 || got["sless-hold"] > float64(took.Milliseconds())+1 {
		t.Errorf("parts %v do not match the backend's delays (listed at 40 ms, healthy at 120 ms, client saw %v)", got, took)
	}
	if want := []string{`app;dur=5;desc="a, sless-ready;dur=2"`, "db;dur=3"}; strings.Join(other, "|") != strings.Join(want, "|") {
		t.Errorf("the function's own entries: %q, want %q", other, want)
	}

	// Warm: the function's entries only.
	resp, err = http.Get(e.url + "/fn/" + e.ns + "/cold")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, other := platformTimings(t, resp.Header); len(got) != 0 || len(other) != 2 {
		t.Errorf("warm response: Server-Timing %q", resp.Header.Values("Server-Timing"))
	}
}

// sless_function_replicas and _desired_replicas follow the function's status, for every function
// /fn/ has served, and go with the function.
func TestReplicaGauges(t *testing.T) {
	e := newScaleEnv(t, nil)
	metrics := func() string {
		_, b := scrape(t, e.srv, "", "")
		return string(b)
	}
	if m := metrics(); strings.Contains(m, "sless_function_replicas{") {
		t.Errorf("a series before /fn/ saw the function:\n%s", m)
	}
	if resp, err := http.Get(e.url + "/fn/" + e.ns + "/cold"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	e.stores.Functions.SetStatus(e.ns, "cold", func(s *lifecycle.FunctionStatus) { s.Replicas, s.DesiredReplicas = 1, 3 })
	m := metrics()
	for _, want := range []string{
		`sless_function_replicas{function="cold",namespace="` + e.ns + `"} 1`,
		`sless_function_desired_replicas{function="cold",namespace="` + e.ns + `"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Deleted (here: behind the API's back; /fn/ forgets it on its next request): no series.
	if err := e.stores.Functions.Delete(context.Background(), e.ns, "cold"); err != nil {
		t.Fatal(err)
	}
	if m := metrics(); strings.Contains(m, "sless_function_replicas{") {
		t.Errorf("a deleted function still has a replicas series")
	}
	http.Get(e.url + "/fn/" + e.ns + "/cold")
	if m := metrics(); strings.Contains(m, `namespace="`+e.ns+`"`) {
		t.Errorf("a forgotten function still has series:\n%s", m)
	}
}
