package apitest

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
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
