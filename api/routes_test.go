package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	e.Srv.ObserveBuild("succeeded", 1500000)
	code, _, b := e.Raw("GET", "/metrics", "", "", nil)
	for _, want := range []string{`sless_http_requests_total{code="200",method="POST",route="/v1/namespaces/{ns}/ensure"} 1`,
		`sless_builds_total{result="succeeded"} 1`, "sless_http_request_duration_seconds_bucket"} {
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The conformance suite on the in-memory unit-test stores; the real backends run it in
// local/state (bbolt) and operator/kubestore (kube-apiserver).
func TestConformanceMemstore(t *testing.T) { apitest.Run(t, apitest.Memstore) }
