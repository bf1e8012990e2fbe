package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	code, _, b := e.Raw("GET", "/metrics", "", "", nil)
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
	_, _, body := e.Raw("GET", "/metrics", "", "", nil)
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
