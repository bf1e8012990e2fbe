package k8s_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sless-dev/sless/api/apiv1"
)

// After real traffic on the cluster (an upload, a build, calls, a cold start from zero), every
// sless_ family that sless's pods (API and controller replicas) serve has moved on one of them, but
// those this traffic cannot move (each names the test that moves it), and Prometheus's linter
// finds nothing on any pod.
func TestMetricsMoved(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("metrics"))
	ctx := context.Background()
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "metered", Runtime: "python3.11", IdleTimeoutSec: 5}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "metered", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'metered'\n"})
	call := func() {
		t.Helper()
		resp, err := httpc.Get(f.Status.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call: %d", resp.StatusCode)
		}
	}
	status := func() apiv1.FunctionStatus {
		f, err := c.GetFunction(ctx, "metered")
		if err != nil {
			t.Fatal(err)
		}
		return f.Status
	}
	call()
	for deadline := time.Now().Add(3 * time.Minute); status().Replicas != 0; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not at zero after 3 minutes: %+v", status())
		}
	}
	call() // a cold start
	for deadline := time.Now().Add(time.Minute); status().Replicas == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status.replicas still 0 a minute after the cold start: %+v", status())
		}
	}

	elsewhere := map[string]string{
		"sless_dependency_cache_hits_total": "TestDependencies (local), TestDependenciesJob",
		"sless_dependency_installs_total":   "TestDependencies (local), TestDependenciesJob",
		"sless_invocations_dropped_total":   "api/pgstore's tests: only a full buffer moves it",
		"sless_invocations_buffered":        "a gauge, 0 once written",
		"sless_function_held_requests":      "a gauge, 0 when idle", "sless_function_in_flight_requests": "a gauge, 0 when idle",
		"sless_async_accepted_total": "TestAsyncOnKubernetes (which may run after this one)",
		"sless_async_queue_depth":    "a gauge, 0 once delivered", "sless_async_oldest_age_seconds": "a gauge, 0 once delivered",
		"sless_async_dead_letters": "TestAsyncOnKubernetes", "sless_deliveries_total": "TestRabbitMQOnKubernetes, TestAsyncOnKubernetes",
	}
	moved, seen := map[string]bool{}, map[string]bool{}
	pods := strings.Fields(kubectl(t, "get", "pods", "-n", "sless-system", "-l", "app.kubernetes.io/part-of=sless", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) < 2 {
		t.Fatalf("sless pods: %v", pods)
	}
	for _, pod := range pods {
		out := kubectl(t, "get", "--raw", "/api/v1/namespaces/sless-system/pods/"+pod+":9091/proxy/metrics")
		if problems, err := promlint.New(strings.NewReader(out)).Lint(); err != nil || len(problems) != 0 {
			t.Errorf("%s: promlint: %v %+v", pod, err, problems)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(out))
		if err != nil {
			t.Fatalf("%s: %v", pod, err)
		}
		for name, mf := range families {
			if !strings.HasPrefix(name, "sless_") {
				continue
			}
			seen[name] = true
			for _, m := range mf.GetMetric() {
				moved[name] = moved[name] || value(m) > 0
			}
		}
	}
	for name := range seen {
		if !moved[name] && elsewhere[name] == "" {
			t.Errorf("%s did not move on any sless pod after real traffic", name)
		}
	}
	for _, want := range []string{"sless_builds_total", "sless_build_duration_seconds", "sless_upload_bytes", "sless_function_requests_total",
		"sless_function_cold_starts_total", "sless_function_cold_start_duration_seconds", "sless_function_replicas",
		"sless_function_desired_replicas", "sless_invocations_written_total"} {
		if !seen[want] {
			t.Errorf("no sless pod serves %s", want)
		}
	}
	// The public endpoint (the API's NodePort) serves none of it, with or without the tenant's token.
	for who, tok := range map[string]string{"no token": "", "the tenant's token": token(t, subject("metrics"))} {
		req, _ := http.NewRequest(http.MethodGet, cluster.Endpoint+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "sless_") {
			t.Errorf("the public /metrics with %s: %d %.200s, want 404", who, resp.StatusCode, b)
		}
	}
	n := 0
	for _, m := range moved {
		if m {
			n++
		}
	}
	t.Logf("%d sless_ families on %d pods (%v), %d moved", len(seen), len(pods), pods, n)
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}
