package local

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/runspec"
)

// A container is made in a tenant's range only while the range is its namespace's, and a range
// with a container being made in it, or left, is not given away. On a real state file; the
// container list is what podman would answer (TestUIDRangesReusedOnceContainersAreGone runs the
// whole with real podman, where a creation in flight cannot be held still).
func TestUIDRangeGuard(t *testing.T) {
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var containers []runner.Container
	u := newUIDRanges(db, func(context.Context) ([]runner.Container, error) { return containers, nil }, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	spec := func(ns string, base uint32) podman.Spec {
		return podman.Spec{Name: "c", IDBase: base, Labels: map[string]string{runspec.LabelNamespace: ns}}
	}
	base := func(ns string) uint32 {
		t.Helper()
		if err := db.Namespaces.Ensure(ctx, ns); err != nil {
			t.Fatal(err)
		}
		b, err := u.base(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	a := base("a")
	done, err := u.guard(ctx, spec("a", a)) // a container of a being created
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Namespaces.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if b := base("b"); b == a {
		t.Fatal("a deleted namespace's range was given away while a container was being made in it")
	}
	done()
	containers = []runner.Container{{Name: "c", State: "exited", Labels: map[string]string{runspec.LabelNamespace: "a"}}}
	if c := base("c"); c == a {
		t.Fatal("a deleted namespace's range was given away while a stopped container of it is left")
	}
	containers = nil
	d := base("d")
	if d != a {
		t.Fatalf("d got %d, want the deleted namespace's %d: nothing of it is left", d, a)
	}
	if _, err := u.guard(ctx, spec("a", a)); err == nil {
		t.Error("a container of the deleted namespace was let into the range that is now d's")
	}
	if _, err := u.guard(ctx, spec("", d)); err == nil {
		t.Error("a container without a namespace label was let into a tenant's range")
	}
	if done, err := u.guard(ctx, spec("d", d)); err != nil {
		t.Errorf("d's own container: %v", err)
	} else {
		done()
	}
}
