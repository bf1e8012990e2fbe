package apitest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

// testScaleFields: the scale of a function has its defaults (max_replicas: max(10, min)),
// answers always show it and the replica counts (0 included), and it changes in place.
func testScaleFields(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	ctx := context.Background()
	base := "/v1/namespaces/" + e.NS + "/functions"

	code, _, b := e.Raw("POST", base, e.Token, "application/json", []byte(`{"name":"plain","runtime":"python3.11"}`))
	if code != 201 {
		t.Fatalf("%d %s", code, b)
	}
	var raw map[string]any
	json.Unmarshal(b, &raw)
	st, _ := raw["status"].(map[string]any)
	for _, k := range []string{"replicas", "desired_replicas"} {
		if v, ok := st[k]; !ok || v != float64(0) {
			t.Errorf("status.%s = %v (present %v), want 0 and always present", k, v, ok)
		}
	}
	if v, ok := raw["min_replicas"]; !ok || v != float64(0) {
		t.Errorf("min_replicas = %v (present %v)", v, ok)
	}
	f, err := e.C.GetFunction(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if f.MinReplicas != 0 || f.MaxReplicas != apiv1.DefaultMaxReplicas || f.Concurrency != apiv1.DefaultConcurrency || f.IdleTimeoutSec != apiv1.DefaultIdleTimeout {
		t.Errorf("defaults: %d %d %d %d", f.MinReplicas, f.MaxReplicas, f.Concurrency, f.IdleTimeoutSec)
	}

	f, err = e.C.CreateFunction(ctx, apiv1.Function{Name: "busy", Runtime: "python3.11", MinReplicas: 20, Concurrency: 1, IdleTimeoutSec: 5})
	if err != nil {
		t.Fatal(err)
	}
	if f.MinReplicas != 20 || f.MaxReplicas != 20 || f.Concurrency != 1 || f.IdleTimeoutSec != 5 {
		t.Errorf("min 20 without max: %d %d %d %d", f.MinReplicas, f.MaxReplicas, f.Concurrency, f.IdleTimeoutSec)
	}
	f.MinReplicas, f.MaxReplicas, f.Concurrency, f.IdleTimeoutSec = 0, 100, 1000, 86400
	if f, err = e.C.UpdateFunction(ctx, *f); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.C.GetFunction(ctx, "busy"); got.MinReplicas != 0 || got.MaxReplicas != 100 || got.Concurrency != 1000 || got.IdleTimeoutSec != 86400 {
		t.Errorf("after an update: %d %d %d %d", got.MinReplicas, got.MaxReplicas, got.Concurrency, got.IdleTimeoutSec)
	}
}
