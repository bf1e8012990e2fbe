package local

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

// A reconcile that acted on an older record must not report Ready over the Pending an upload set
// meanwhile (seen as a flaky "Ready with the new code_sha256 while the old code answers").
func TestStaleReconcileKeepsPending(t *testing.T) {
	db, err := openDB(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p := &Platform{functions: &boltStore[apiv1.Function]{db: db, bucket: bucketFunctions,
		name: func(f apiv1.Function) string { return f.Name }, notify: func(string, string) {}}}
	ctx := context.Background()
	fn, err := p.functions.Create(ctx, "ns", apiv1.Function{Name: "f", Runtime: "python3.11",
		Status: apiv1.FunctionStatus{Phase: apiv1.PhasePending, CodeSHA256: "aaa"}})
	if err != nil {
		t.Fatal(err)
	}
	snap := fn // what the reconcile read
	// The API records a new upload while that reconcile is still running.
	if _, err := p.functions.Update(ctx, "ns", "f", func(f *apiv1.Function) error {
		f.Status.CodeSHA256, f.Status.Phase = "bbb", apiv1.PhasePending
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ready := func(s *apiv1.FunctionStatus) { s.Phase, s.Image = apiv1.PhaseReady, "img-a" }
	if err := p.setStatus(ctx, "ns", &snap, ready); err != nil {
		t.Fatal(err)
	}
	got, _ := p.functions.Get(ctx, "ns", "f")
	if got.Status.Phase != apiv1.PhasePending || got.Status.Image != "img-a" {
		t.Fatalf("stale reconcile wrote phase %q image %q; want Pending with the image it started", got.Status.Phase, got.Status.Image)
	}
	// The reconcile of the current record does set Ready.
	if err := p.setStatus(ctx, "ns", &got, ready); err != nil {
		t.Fatal(err)
	}
	if got, _ = p.functions.Get(ctx, "ns", "f"); got.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("phase %q, want Ready", got.Status.Phase)
	}
	// An env-only change is a new spec too.
	snap = got
	p.functions.Update(ctx, "ns", "f", func(f *apiv1.Function) error {
		f.EnvVars, f.Status.Phase = map[string]string{"A": "1"}, apiv1.PhasePending
		return nil
	})
	p.setStatus(ctx, "ns", &snap, ready)
	if got, _ = p.functions.Get(ctx, "ns", "f"); got.Status.Phase != apiv1.PhasePending {
		t.Fatalf("phase %q after an env change, want Pending", got.Status.Phase)
	}
}
