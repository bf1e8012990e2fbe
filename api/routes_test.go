package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
)

func TestHealthReadyMetrics(t *testing.T) {
	ready := errors.New("registry not ready yet")
	e := apitest.NewEnv(t, apitest.Memstore, api.WithReadiness(func(context.Context) error { return ready }))
	if code, _, b := e.Raw("GET", "/healthz", "", "", nil); code != 200 || !strings.Contains(string(b), "ok") {
		t.Errorf("healthz %d %s", code, b)
	}
	if code, ecode, _ := e.Raw("GET", "/readyz", "", "", nil); code != 503 || ecode != apiv1.CodeNotReady {
		t.Errorf("readyz while not ready: %d %s", code, ecode)
	}
	ready = nil
	if code, _, _ := e.Raw("GET", "/readyz", "", "", nil); code != 200 {
		t.Errorf("readyz: %d", code)
	}
	e.Ensure()
	code, b := scrape(t, e.Srv, "", "")
	for _, want := range []string{`sless_http_requests_total{code="200",method="POST",route="/v1/namespaces/{ns}/ensure"} 1`,
		"sless_http_request_duration_seconds_bucket"} {
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Prometheus's own metrics linter (promtool check metrics) finds nothing.
	problems, err := promlint.New(bytes.NewReader(b)).Lint()
	if err != nil || len(problems) != 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
}

// scrape is GET /metrics of srv's registry on a listener of its own (MetricsHandler, as the
// binaries serve it), sending send as the bearer token when set.
func scrape(t *testing.T, srv *api.Server, token, send string) (int, []byte) {
	t.Helper()
	hs := httptest.NewServer(api.MetricsHandler(srv.Metrics(), token))
	defer hs.Close()
	req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
	if send != "" {
		req.Header.Set("Authorization", "Bearer "+send)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// The metrics listener with a scrape token: only that token opens it, sent as a bearer token; a
// tenant's JWT or an "admin" one is refused like no token (401, and not a word of the series).
// Without a token it serves anyone who reaches it (its address is the protection), and any other
// path or method is refused.
func TestMetricsHandlerToken(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	const token = "scrape-0123456789abcdef"
	for who, send := range map[string]string{"no token": "", "a wrong token": "scrape-0123456789abcdeX", "a prefix": token[:10],
		"the token twice": token + token, "the tenant's JWT": e.Token, "an admin JWT": apitest.AdminToken(t, apitest.Secret), "a padded token": " " + token} {
		code, b := scrape(t, e.Srv, token, send)
		if code != http.StatusUnauthorized || !strings.Contains(string(b), `"unauthenticated"`) || strings.Contains(string(b), "sless_") {
			t.Errorf("%s: %d %.200s, want 401 unauthenticated", who, code, b)
		}
	}
	if code, b := scrape(t, e.Srv, token, token); code != 200 || !strings.Contains(string(b), "sless_http_requests_total{") {
		t.Errorf("the scrape token: %d %.200s", code, b)
	}
	if code, b := scrape(t, e.Srv, "", ""); code != 200 || !strings.Contains(string(b), "sless_http_requests_total{") {
		t.Errorf("no token configured: %d %.200s", code, b)
	}
	hs := httptest.NewServer(api.MetricsHandler(e.Srv.Metrics(), token))
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("a 401 without WWW-Authenticate")
	}
	for _, tc := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/v1/namespaces/" + e.NS + "/functions"}, {"GET", "/metricsx"}, {"POST", "/metrics"}} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[string]int{"GET": 404, "POST": 405}[tc.method]; resp.StatusCode != want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, want)
		}
	}
}

// The conformance suite on the in-memory unit-test stores; the real backends run it in
// local/state (bbolt) and operator/kubestore (kube-apiserver).
func TestConformanceMemstore(t *testing.T) { apitest.Run(t, apitest.Memstore) }

// /fn/ is public: whatever methods and headers anyone sends, /metrics stays bounded and large
// headers are refused before they cost memory.
func TestMetricsAndHeadersBounded(t *testing.T) {
	e := apitest.NewEnv(t, apitest.Memstore)
	e.Ensure()
	e.Function("f")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	e.Ready("f", up.URL)
	for i := range 1000 {
		req, _ := http.NewRequest(fmt.Sprintf("X%04d", i), e.URL+"/fn/"+e.NS+"/f", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	_, body := scrape(t, e.Srv, "", "")
	methods := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "sless_http_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `method="`)
		m, _, _ := strings.Cut(rest, `"`)
		methods[m] = true
	}
	if len(methods) > 10 || !methods["other"] {
		t.Errorf("%d method label values after 1,000 made-up methods: %v", len(methods), methods)
	}
	req, _ := http.NewRequest("GET", e.URL+"/fn/"+e.NS+"/f", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("100 KiB of headers: %d, want 431", resp.StatusCode)
	}
}
