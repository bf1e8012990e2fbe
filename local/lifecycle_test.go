package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/faultproxy"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/oci"
)

// The single host moves a function's status through package lifecycle on the build path, as the
// Kubernetes backend does (operator/controllers' lifecycle checks): the controller's reconcile on
// real state (bbolt), a real build pipeline and a real registry behind a fault-injecting proxy.
// What the status says after each step is checked with lifecycletest.Wrote. (Starting, Ready,
// StartFailed, Disabled and Scaled run containers: TestSlessUp, TestLogsUp and TestTenantQuotas
// check them on a real sless up.)
func TestBuildLifecycle(t *testing.T) {
	reg := testenv.Registry(t)
	proxy, err := faultproxy.Start("127.0.0.1", "http://"+reg, faultproxy.WithMethods("PUT", "POST", "PATCH"), faultproxy.WithStatus(403))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	dir := t.TempDir()
	db, err := state.Open(filepath.Join(dir, "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	code, err := codestore.NewDir(filepath.Join(dir, "code"))
	if err != nil {
		t.Fatal(err)
	}
	builder, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	// Dependencies: an install that holds its build slot until released, then is still pending
	// (as a Kubernetes deps Job would be).
	blocked, release := make(chan struct{}), make(chan struct{})
	installs := depsFunc(func() error {
		blocked <- struct{}{}
		<-release
		return &build.PendingError{Reason: "installing dependencies: still", Dependencies: true}
	})
	var builds atomic.Int64
	pipeline, err := build.New(code, builder, build.WithRegistry(proxy.Addr()), build.WithConcurrency(1), build.WithDeps(installs),
		build.WithObserver(func(build.Observation) { builds.Add(1) }),
		build.WithRuntimes(map[string]string{apiv1.RuntimePython311: testenv.RuntimeImage(t, proxy.Addr())}), build.WithTempDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	c := newController(&Platform{db: db, log: slog.New(slog.DiscardHandler)})
	c.pipeline = pipeline
	ctx := context.Background()
	const ns = "sless-00000000000000c1"
	if err := db.Namespaces.Ensure(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "f", Runtime: apiv1.RuntimePython311, Entrypoint: "handler.handle"}); err != nil {
		t.Fatal(err)
	}
	read := func() lifecycle.FunctionStatus {
		t.Helper()
		o, err := db.Functions.Get(ctx, ns, "f")
		if err != nil {
			t.Fatal(err)
		}
		return o.Status
	}
	wrote := func(k lifecycletest.Kind) {
		t.Helper()
		if err := lifecycletest.Wrote(k, read()); err != nil {
			t.Error(err)
		}
	}
	// built reconciles the build path once (ensureBuilt: the run path needs containers).
	built := func() (string, error) {
		t.Helper()
		o, err := db.Functions.Get(ctx, ns, "f")
		if err != nil {
			t.Fatal(err)
		}
		return c.ensureBuilt(ctx, ns, o, status{db: db, ns: ns, name: "f", generation: o.Generation}.apply)
	}
	upload := func(files map[string]string) {
		t.Helper()
		z := testenv.Zip(files)
		sum := sha256.Sum256(z)
		hexSum := hex.EncodeToString(sum[:])
		if err := code.Put(ctx, codestore.Key(ns, "f", hexSum), bytes.NewReader(z), int64(len(z))); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Functions.Update(ctx, ns, "f", func(s *objects.FunctionSpec) error { s.CodeSHA256 = hexSum; return nil }); err != nil {
			t.Fatal(err)
		}
	}

	if err := c.reconcileFunction(ctx, ns, "f"); err != nil {
		t.Fatal(err)
	}
	wrote(lifecycletest.WaitingForCode)

	// A build with dependencies starts and holds the one build slot: Building.
	upload(map[string]string{"handler.py": "import six\n", "requirements.txt": "six==1.16.0\n"})
	done := make(chan error, 1)
	go func() { _, err := built(); done <- err }()
	<-blocked
	wrote(lifecycletest.BuildStarted)
	if s := read(); s.Phase != apiv1.PhaseBuilding {
		t.Errorf("started: %+v", s)
	}
	// Another function's build finds no slot: it waits, Building (BuildPending).
	if _, err := db.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "g", Runtime: apiv1.RuntimePython311, Entrypoint: "handler.handle"}); err != nil {
		t.Fatal(err)
	}
	g, _ := db.Functions.Get(ctx, ns, "g")
	g.Spec.CodeSHA256 = strings.Repeat("a", 64) // any code: it is not read without a slot
	gst := status{db: db, ns: ns, name: "g", generation: g.Generation}
	if _, err := c.ensureBuilt(ctx, ns, g, gst.apply); !errors.As(err, new(requeueAfter)) {
		t.Errorf("a build without a slot: %v, want a requeue", err)
	}
	if o, _ := db.Functions.Get(ctx, ns, "g"); lifecycletest.Wrote(lifecycletest.BuildPending, o.Status) != nil || o.Status.Message != "waiting for a build slot" {
		t.Errorf("without a slot: %+v: %v", o.Status, lifecycletest.Wrote(lifecycletest.BuildPending, o.Status))
	}
	// The install is still pending: Building, installing dependencies.
	close(release)
	if err := <-done; !errors.As(err, new(requeueAfter)) {
		t.Fatalf("pending dependencies: %v, want a requeue", err)
	}
	wrote(lifecycletest.BuildPending)
	if s := read(); s.Phase != apiv1.PhaseBuilding || apiv1.FindCondition(s.Conditions, apiv1.ConditionBuilt).Reason != apiv1.ReasonInstallingDependencies {
		t.Errorf("pending: %+v", s)
	}

	upload(map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	proxy.Fail() // the registry refuses the platform's pushes (403: ggcr does not retry it)
	for n := 1; n <= lifecycle.RetryBudget+1; n++ {
		img, err := built()
		if img != "" || err == nil || build.IsUserError(err) {
			t.Fatalf("attempt %d with the registry refusing: %q, %v", n, img, err)
		}
		s := read()
		// Woken again before the next attempt is due (a resync, another event): no build.
		before := builds.Load()
		if _, err := built(); !errors.As(err, new(requeueAfter)) || builds.Load() != before {
			t.Errorf("attempt %d: woken early: %v after %d builds, want a requeue and none", n, err, builds.Load()-before)
		}
		// The wait passes.
		if err := db.Functions.UpdateStatus(ns, "f", 0, func(s *lifecycle.FunctionStatus) { s.Retry.NotBefore = time.Time{} }); err != nil {
			t.Fatal(err)
		}
		switch {
		case n < lifecycle.RetryBudget:
			wrote(lifecycletest.BuildRetrying)
			if s.Phase != apiv1.PhaseBuilding || s.Retry.Attempts != n || !strings.Contains(s.Message, "403") {
				t.Errorf("attempt %d: %+v", n, s)
			}
		default: // the budget is spent: Failed, and still retried
			wrote(lifecycletest.BuildExhausted)
			if s.Phase != apiv1.PhaseFailed || s.Retry.Attempts != n {
				t.Errorf("attempt %d: %+v", n, s)
			}
		}
	}
	proxy.Heal()
	img, err := built()
	if err != nil || img == "" {
		t.Fatalf("once the registry works: %q, %v", img, err)
	}
	wrote(lifecycletest.BuildSucceeded)
	if s := read(); s.Image != img || s.Retry != nil || s.Phase != apiv1.PhaseBuilding {
		t.Errorf("built: %+v", s)
	}

	// What sless up kept before the status held the build key (the build record's key, image and
	// failure latch) is taken over without a build.
	o, _ := db.Functions.Get(ctx, ns, "f")
	k := pipeline.Key(build.Request{Namespace: ns, Function: "f", Runtime: o.Spec.Runtime, Entrypoint: o.Spec.Entrypoint, CodeSHA256: o.Spec.CodeSHA256})
	if err := db.Functions.UpdateStatus(ns, "f", 0, func(s *lifecycle.FunctionStatus) { s.BuildKey = "" }); err != nil {
		t.Fatal(err)
	}
	if err := db.PutBuild(ns, "f", state.Build{Key: k, Image: img, Images: []string{img}}); err != nil {
		t.Fatal(err)
	}
	n := builds.Load()
	if got, err := built(); got != img || err != nil || builds.Load() != n {
		t.Errorf("an earlier build record: %q, %v after %d builds; want %s without a build", got, err, builds.Load()-n, img)
	}
	if s := read(); s.BuildKey != k {
		t.Errorf("the build key not taken over: %+v", s)
	}
	if b, _ := db.Build(ns, "f"); b.Key != "" || b.Image != "" || len(b.Images) != 1 {
		t.Errorf("the build record after the takeover: %+v", b)
	}

	upload(map[string]string{"../escape.py": "x"})
	if img, err := built(); img != "" || err != nil {
		t.Fatalf("a user's bad archive: %q, %v (want no image, no error: not retried)", img, err)
	}
	wrote(lifecycletest.BuildFailedUser)
	if s := read(); s.FailedBuildKey == "" || !strings.Contains(s.Message, "unsafe path") {
		t.Errorf("failed: %+v", s)
	}
	// Latched: reconciling again neither builds nor writes.
	before := read()
	if img, err := built(); img != "" || err != nil {
		t.Fatalf("again: %q, %v", img, err)
	}
	if after := read(); after.Message != before.Message || after.Phase != before.Phase {
		t.Errorf("latched build moved: %+v → %+v", before, after)
	}
}

// depsFunc is a build.Deps that runs f for every install.
type depsFunc func() error

func (f depsFunc) Layer(context.Context, deps.Spec, string) (deps.Result, error) {
	return deps.Result{}, f()
}
