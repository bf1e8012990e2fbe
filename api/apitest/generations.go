package apitest

import (
	"bytes"
	"context"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
)

// The API writes specs only and derives Pending from a generation the controller has not observed:
// a status written for an older spec never shows as the state of the newer one (knative's split).
func testGenerationsAndStatus(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	ctx := context.Background()
	f := e.Function("gen")
	if f.Status.Phase != apiv1.PhasePending || f.Status.Message == "" {
		t.Fatalf("a new function: %+v, want Pending with a message", f.Status)
	}
	o, err := e.Be.Functions.Get(ctx, e.NS, "gen")
	if err != nil || o.Generation < 1 || o.ObservedGeneration >= o.Generation {
		t.Fatalf("stored: generation %d observed %d (%v); want a generation not yet observed", o.Generation, o.ObservedGeneration, err)
	}
	created := o.Generation

	// The controller catches up: its status shows as it is.
	if err := e.Ctrl.SetFunctionStatus(e.NS, "gen", func(s *lifecycle.FunctionStatus) {
		s.Phase, s.Image = apiv1.PhaseReady, "registry.test/ns/gen@sha256:"+string(bytes.Repeat([]byte("a"), 64))
	}); err != nil {
		t.Fatal(err)
	}
	got, _ := e.C.GetFunction(ctx, "gen")
	if got.Status.Phase != apiv1.PhaseReady || got.Status.URL != e.Srv.FunctionURL(e.NS, "gen") {
		t.Fatalf("after the controller: %+v", got.Status)
	}

	// An upload is a spec change: Pending at once, with the new code, though the controller wrote
	// nothing; the image it built before stays visible.
	z := ZipOf(t, map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	up, err := e.C.Upload(ctx, "gen", bytes.NewReader(z), int64(len(z)))
	if err != nil || up.Phase != apiv1.PhasePending {
		t.Fatalf("upload: %+v %v", up, err)
	}
	got, _ = e.C.GetFunction(ctx, "gen")
	if got.Status.Phase != apiv1.PhasePending || got.Status.CodeSHA256 != up.CodeSHA256 || got.Status.Image == "" {
		t.Errorf("after an upload: %+v", got.Status)
	}
	o, _ = e.Be.Functions.Get(ctx, e.NS, "gen")
	if o.Generation <= created || o.Spec.CodeSHA256 != up.CodeSHA256 || o.Status.Phase != apiv1.PhaseReady {
		t.Errorf("stored after upload: generation %d (was %d), spec code %q, status phase %q: the API must write the spec only",
			o.Generation, created, o.Spec.CodeSHA256, o.Status.Phase)
	}
	uploaded := o.Generation

	// The same code again and an unchanged PUT change nothing.
	if again, err := e.C.Upload(ctx, "gen", bytes.NewReader(z), int64(len(z))); err != nil || again.CodeSHA256 != up.CodeSHA256 {
		t.Fatalf("same upload: %+v %v", again, err)
	}
	if _, err := e.C.UpdateFunction(ctx, *got); err != nil {
		t.Fatal(err)
	}
	if o, _ = e.Be.Functions.Get(ctx, e.NS, "gen"); o.Generation != uploaded {
		t.Errorf("generation %d after no change, want %d", o.Generation, uploaded)
	}
	// An env change is a new spec too; an update keeps the uploaded code.
	got.EnvVars = map[string]string{"A": "1"}
	upd, err := e.C.UpdateFunction(ctx, *got)
	if err != nil || upd.Status.Phase != apiv1.PhasePending || upd.Status.CodeSHA256 != up.CodeSHA256 {
		t.Fatalf("env change: %+v %v", upd, err)
	}
	if o, _ = e.Be.Functions.Get(ctx, e.NS, "gen"); o.Generation <= uploaded {
		t.Errorf("generation %d after an env change, want above %d", o.Generation, uploaded)
	}
	if err := e.Ctrl.SetFunctionStatus(e.NS, "gen", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady }); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.C.GetFunction(ctx, "gen"); got.Status.Phase != apiv1.PhaseReady || got.EnvVars["A"] != "1" {
		t.Errorf("after the controller observed the env change: %+v", got)
	}
}
