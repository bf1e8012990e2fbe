package apitest

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/sless-dev/sless/api/apiv1"
)

// series are the per-function series of the API's registry for function name.
func series(t *testing.T, e *Env, name string) map[string]*dto.Metric {
	t.Helper()
	mfs, err := e.Srv.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == e.NS && labels["function"] == name {
				out[mf.GetName()+"/"+labels["code"]] = m
			}
		}
	}
	return out
}

// testFunctionMetrics: /metrics has each function's requests, durations, in flight and held,
// labelled namespace and function; a deleted function's series go with it.
func testFunctionMetrics(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("counted")
	up, ch := EchoUpstream(t)
	e.Ready("counted", up.URL)
	for range 3 {
		if code, _, b := e.Raw("GET", "/fn/"+e.NS+"/counted/", "", "", nil); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		<-ch
	}
	s := series(t, e, "counted")
	if m := s["sless_function_requests_total/200"]; m == nil || m.GetCounter().GetValue() != 3 {
		t.Errorf("requests_total{code=200}: %v", m)
	}
	if m := s["sless_function_request_duration_seconds/"]; m == nil || m.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("duration histogram: %v", m)
	}
	for _, k := range []string{"sless_function_in_flight_requests/", "sless_function_held_requests/"} {
		if m := s[k]; m == nil || m.GetGauge().GetValue() != 0 {
			t.Errorf("%s: %v", k, m)
		}
	}
	if err := e.C.DeleteFunction(context.Background(), "counted"); err != nil {
		t.Fatal(err)
	}
	if s := series(t, e, "counted"); len(s) != 0 {
		t.Errorf("series of a deleted function: %v", s)
	}
}

// AdminToken is a token valid for the HS256 secret that claims every privilege an identity
// provider might grant: sless has no administrator, so it opens no more than a tenant's (a test
// that something is no tenant's to see uses it besides the tenant's own).
func AdminToken(t testing.TB, secret []byte) string {
	return Sign(t, jwt.SigningMethodHS256, secret, Claims("admin", map[string]any{"admin": true, "role": "admin",
		"roles": []string{"admin"}, "groups": []string{"system:masters"}, "scope": "metrics admin"}), "")
}

// testMetricsNotPublic: the API's listener answers 404 for /metrics whoever asks (no token, the
// tenant's, an "admin" one) and names no namespace or function in the answer: the series are
// every tenant's (MetricsHandler serves them on a listener of their own).
func testMetricsNotPublic(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("secret-fn")
	up, ch := EchoUpstream(t)
	e.Ready("secret-fn", up.URL)
	if code, _, b := e.Raw("GET", "/fn/"+e.NS+"/secret-fn/", "", "", nil); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	<-ch
	if len(series(t, e, "secret-fn")) == 0 {
		t.Fatal("the call made no series: nothing to leak")
	}
	for who, token := range map[string]string{"no token": "", "the tenant's token": e.Token, "an admin token": AdminToken(t, Secret)} {
		for _, path := range []string{"/metrics", "/metrics/", "/metrics?format=text"} {
			code, ecode, b := e.Raw("GET", path, token, "", nil)
			if code != http.StatusNotFound || ecode != apiv1.CodeNotFound {
				t.Errorf("GET %s with %s: %d %s, want 404 not_found", path, who, code, ecode)
			}
			if strings.Contains(string(b), e.NS) || strings.Contains(string(b), "secret-fn") || strings.Contains(string(b), "sless_") {
				t.Errorf("GET %s with %s tells: %.300s", path, who, b)
			}
		}
	}
}

// fnAnswered waits until /fn/ has finished n requests answered with status code: their handlers
// returned, so a record any of them made was handed to the store, and is listed no later than
// one handed over after it (the stores keep the order).
func fnAnswered(t *testing.T, e *Env, code, n int) {
	t.Helper()
	count := func() float64 {
		mfs, err := e.Srv.Metrics().Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, mf := range mfs {
			if mf.GetName() != "sless_http_requests_total" {
				continue
			}
			for _, m := range mf.Metric {
				labels := map[string]string{}
				for _, l := range m.Label {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["route"] == "/fn/{ns}/{name}" && labels["code"] == strconv.Itoa(code) {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	if !waitFor(10*time.Second, func() bool { return count() >= float64(n) }) {
		t.Fatalf("/fn/ answered %v requests with %d, want %d", count(), code, n)
	}
}
