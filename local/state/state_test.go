package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
)

// bboltBackend is the single host's stores in a fresh state file.
var bboltBackend = apitest.Backend{Name: "bbolt", New: func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, apitest.Controller) {
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	key, err := state.LoadSecretKey(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := db.OpenSecrets(key)
	if err != nil {
		t.Fatal(err)
	}
	return objects.Backend{Namespaces: db.Namespaces, Functions: db.Functions, Triggers: db.Triggers, Jobs: db.Jobs, Secrets: secrets,
		Invocations: db.Invocations, Code: code, Resolver: r}, controller{db}
}}

// controller writes status as local's controller does: for the generation it read.
type controller struct{ db *state.DB }

func (c controller) SetFunctionStatus(ns, name string, f func(*lifecycle.FunctionStatus)) error {
	o, err := c.db.Functions.Get(context.Background(), ns, name)
	if err != nil {
		return err
	}
	return c.db.Functions.UpdateStatus(ns, name, o.Generation, f)
}

func (c controller) SetJobStatus(ns, name string, f func(*apiv1.JobStatus)) error {
	o, err := c.db.Jobs.Get(context.Background(), ns, name)
	if err != nil {
		return err
	}
	return c.db.Jobs.UpdateStatus(ns, name, o.Generation, f)
}

// SetFunctionQuota caps functions per namespace as sless up --tenant-quota-functions does.
func (c controller) SetFunctionQuota(_ string, n int) error {
	c.db.SetMaxFunctions(n)
	return nil
}

// The API's conformance suite on the real bbolt state sless up serves from.
func TestConformance(t *testing.T) { apitest.Run(t, bboltBackend) }

// A status written for a generation the spec has moved past does not make the newer spec look
// done, and a status write is not a spec change (no notification, no new generation).
func TestStatusOfAnOlderGeneration(t *testing.T) {
	var changes []string
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), func(k state.Kind, ns, name string) { changes = append(changes, string(k)+" "+name) })
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.Namespaces.Ensure(ctx, "ns"); err != nil {
		t.Fatal(err)
	}
	o, err := db.Functions.Create(ctx, "ns", objects.FunctionSpec{Name: "f", Runtime: "python3.11", CodeSHA256: "aaa"})
	if err != nil {
		t.Fatal(err)
	}
	read := o.Generation // what a reconcile read
	// The API records a new upload while that reconcile still runs.
	if _, err := db.Functions.Update(ctx, "ns", "f", func(s *objects.FunctionSpec) error { s.CodeSHA256 = "bbb"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := db.Functions.UpdateStatus("ns", "f", read, func(s *lifecycle.FunctionStatus) { s.Phase, s.Image = apiv1.PhaseReady, "img-a" }); err != nil {
		t.Fatal(err)
	}
	got, _ := db.Functions.Get(ctx, "ns", "f")
	if got.ObservedGeneration != read || got.Generation != read+1 || got.Spec.CodeSHA256 != "bbb" || got.Status.Image != "img-a" {
		t.Fatalf("got %+v: the status describes generation %d, the spec is newer", got, read)
	}
	if want := []string{"function f", "function f"}; len(changes) != len(want) {
		t.Errorf("changes %v, want %v (status writes are not spec changes)", changes, want)
	}
	// An update that changes nothing is no new generation.
	db.Functions.Update(ctx, "ns", "f", func(s *objects.FunctionSpec) error { s.CodeSHA256 = "bbb"; return nil })
	if again, _ := db.Functions.Get(ctx, "ns", "f"); again.Generation != got.Generation || len(changes) != 2 {
		t.Errorf("a no-op update moved the generation to %d or notified (%v)", again.Generation, changes)
	}
	// An older observation never lowers what was observed.
	db.Functions.UpdateStatus("ns", "f", got.Generation, func(*lifecycle.FunctionStatus) {})
	db.Functions.UpdateStatus("ns", "f", read, func(*lifecycle.FunctionStatus) {})
	if o, _ := db.Functions.Get(ctx, "ns", "f"); o.ObservedGeneration != got.Generation {
		t.Errorf("observed generation went back to %d", o.ObservedGeneration)
	}
}

// A state file written by an earlier sless up (schema 1: each object one apiv1 value, the code
// hash in its status) opens with every object carried over: specs, status, and what is observed.
func TestMigratesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	writeSchema1(t, path)
	db, err := state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ready, err := db.Functions.Get(ctx, "sless-1", "ready")
	if err != nil {
		t.Fatal(err)
	}
	if ready.Spec.CodeSHA256 != "c0de" || ready.Spec.MemoryMB != 256 || ready.Spec.EnvVars["A"] != "1" || ready.Status.Phase != apiv1.PhaseReady ||
		ready.Status.Image != "reg/sless-1/ready@sha256:1" || ready.Generation != 1 || ready.ObservedGeneration != 1 {
		t.Errorf("ready function migrated to %+v", ready)
	}
	if b, _ := db.Functions.Get(ctx, "sless-1", "building"); b.ObservedGeneration >= b.Generation || b.Spec.CodeSHA256 != "beef" {
		t.Errorf("a function still building must stay unobserved (Pending until reconciled): %+v", b)
	}
	tr, err := db.Triggers.Get(ctx, "sless-1", "web")
	if err != nil || tr.Spec.Type != apiv1.TriggerHTTP || tr.Spec.FunctionRef != "ready" || tr.Spec.Enabled == nil || *tr.Spec.Enabled || tr.Status.Active {
		t.Errorf("trigger migrated to %+v (%v)", tr, err)
	}
	done, _ := db.Jobs.Get(ctx, "sless-1", "done")
	asked, _ := db.Jobs.Get(ctx, "sless-1", "asked")
	if done.Status.Phase != apiv1.JobSucceeded || done.ObservedGeneration != done.Generation || asked.ObservedGeneration >= asked.Generation || asked.Spec.RunID != 2 {
		t.Errorf("jobs migrated to %+v and %+v", done, asked)
	}
	b, err := db.Build("sless-1", "ready")
	if err != nil || b.Image != "reg/sless-1/ready@sha256:1" || len(b.Images) != 2 || b.Key != "" ||
		b.Legacy != state.LegacyKey("c0de", "python3.11", "handler.handle", "reg/sless/runtime-python3.11@sha256:r") || b.LegacyFailed != "" {
		t.Errorf("build record migrated to %+v (%v)", b, err)
	}
	db.Close()
	// Opening again migrates nothing twice.
	db, err = state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if again, _ := db.Functions.Get(ctx, "sless-1", "ready"); again.Spec.CodeSHA256 != "c0de" || again.Generation != 1 {
		t.Errorf("second open: %+v", again)
	}
}

// writeSchema1 writes what sless up wrote before spec and status were apart.
func writeSchema1(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	no := false
	put := func(tx *bolt.Tx, bucket, key string, v any) {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(v)
		if err := b.Put([]byte(key), raw); err != nil {
			t.Fatal(err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		put(tx, "namespaces", "sless-1", map[string]any{})
		put(tx, "functions", "sless-1/ready", map[string]any{"name": "ready", "runtime": "python3.11", "entrypoint": "handler.handle",
			"memory_mb": 256, "timeout_sec": 30, "env_vars": map[string]string{"A": "1"},
			"status": map[string]any{"phase": "Ready", "image": "reg/sless-1/ready@sha256:1", "code_sha256": "c0de", "url": "http://old/fn/sless-1/ready"}})
		put(tx, "functions", "sless-1/building", map[string]any{"name": "building", "runtime": "nodejs20",
			"status": map[string]any{"phase": "Building", "code_sha256": "beef"}})
		put(tx, "triggers", "sless-1/web", map[string]any{"name": "web", "type": "http", "function_ref": "ready", "enabled": &no,
			"status": map[string]any{"active": false, "url": "http://old/fn/sless-1/ready"}})
		put(tx, "jobs", "sless-1/done", map[string]any{"name": "done", "function_ref": "ready", "run_id": 1,
			"status": map[string]any{"phase": "Succeeded", "last_run_id": 1, "message": "{}"}})
		put(tx, "jobs", "sless-1/asked", map[string]any{"name": "asked", "function_ref": "ready", "run_id": 2,
			"status": map[string]any{"phase": "Pending", "last_run_id": 1}})
		put(tx, "builds", "sless-1/ready", map[string]any{"code_sha256": "c0de", "runtime": "python3.11", "entrypoint": "handler.handle",
			"runtime_ref": "reg/sless/runtime-python3.11@sha256:r", "image": "reg/sless-1/ready@sha256:1",
			"images": []string{"reg/sless-1/ready@sha256:0", "reg/sless-1/ready@sha256:1"}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUIDRanges(t *testing.T) {
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := db.UIDBase("team-a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := db.UIDBase("team-b")
	again, _ := db.UIDBase("team-a")
	if a != state.UIDRangeStart || b != a+state.UIDRangeSize || again != a {
		t.Errorf("ranges a=%d b=%d a again=%d", a, b, again)
	}
	if err := db.Namespaces.Delete(context.Background(), "team-a"); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.UIDBase("team-c"); c == a || c == b {
		t.Errorf("a new namespace got a range in use or used before: %d", c)
	}
}

// A deleted namespace's range is given back only while the namespace stays gone, and the lowest
// range given back is the next one handed out (also after a reopen); ranges in use never are.
func TestUIDRangesReleased(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	base := map[string]uint32{}
	for _, ns := range []string{"a", "b", "c", "d"} {
		if err := db.Namespaces.Ensure(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if base[ns], err = db.UIDBase(ns); err != nil {
			t.Fatal(err)
		}
	}
	// c holds a function: its namespace stays.
	if _, err := db.Functions.Create(ctx, "c", objects.FunctionSpec{Name: "f", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Namespaces.Delete(ctx, "c"); err == nil {
		t.Fatal("a namespace holding a function was deleted")
	}
	if deleted, err := db.DeletedUIDRanges(); err != nil || len(deleted) != 0 {
		t.Fatalf("ranges of live namespaces listed as deleted: %v %v", deleted, err)
	}
	if ok, err := db.ReleaseUIDRange("a"); ok || err != nil {
		t.Fatalf("the range of an existing namespace was released: %v %v", ok, err)
	}
	for _, ns := range []string{"a", "b", "d"} {
		if err := db.Namespaces.Delete(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	deleted, err := db.DeletedUIDRanges()
	if err != nil || len(deleted) != 3 || deleted["b"] != base["b"] || deleted["d"] != base["d"] {
		t.Fatalf("deleted namespaces' ranges: %v %v, want a, b and d of %v", deleted, err, base)
	}
	for _, ns := range []string{"d", "b"} {
		if ok, err := db.ReleaseUIDRange(ns); !ok || err != nil {
			t.Fatalf("releasing %s: %v %v", ns, ok, err)
		}
	}
	// Ensured again before its range was released: it keeps it.
	if err := db.Namespaces.Ensure(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := db.ReleaseUIDRange("a"); ok {
		t.Error("the range of a namespace ensured again was released")
	}
	if got, _ := db.UIDBase("a"); got != base["a"] {
		t.Errorf("a got %d back, want its own %d", got, base["a"])
	}
	db.Close()
	if db, err = state.Open(path, nil); err != nil {
		t.Fatal(err)
	}
	// Released once, handed out once, lowest first; then new ones.
	e, _ := db.UIDBase("e")
	f, _ := db.UIDBase("f")
	g, _ := db.UIDBase("g")
	if e != base["b"] || f != base["d"] || g != base["d"]+state.UIDRangeSize {
		t.Errorf("e %d f %d g %d; want b's %d, d's %d, then a new one", e, f, g, base["b"], base["d"])
	}
	if got, _ := db.UIDBase("c"); got != base["c"] {
		t.Errorf("c (it holds a function) has %d, want its own %d", got, base["c"])
	}
	if ok, _ := db.ReleaseUIDRange("b"); ok {
		t.Error("a range released twice")
	}
}

// The state file is the single host's deps.Pins: a dropped pin is gone for good (also after a
// reopen), the others stay, and dropping one that is not there is fine.
func TestPins(t *testing.T) {
	var _ deps.Pins = (*state.DB)(nil)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, d := range map[string]string{"a": "sha256:aa", "b": "sha256:bb"} {
		if err := db.SetPin(ctx, k, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DropPin(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := db.DropPin(ctx, "never-pinned"); err != nil {
		t.Errorf("dropping a key never pinned: %v", err)
	}
	db.Close()
	if db, err = state.Open(path, nil); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if a, err := db.Pin(ctx, "a"); a != "" || err != nil {
		t.Errorf("dropped pin a = %q, %v; want none", a, err)
	}
	if b, err := db.Pin(ctx, "b"); b != "sha256:bb" || err != nil {
		t.Errorf("pin b = %q, %v; want sha256:bb", b, err)
	}
}

// A namespace delete and a function create racing: either the namespace stays with the function,
// or both are gone; never a function in a namespace that no longer exists (nothing would clean
// it up), and never a namespace deleted from under a function.
func TestNamespaceDeleteRacesCreate(t *testing.T) {
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	outcomes := map[string]int{}
	for i := range 200 {
		ns := fmt.Sprintf("sless-%016x", i)
		if err := db.Namespaces.Ensure(ctx, ns); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var createErr, deleteErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, createErr = db.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "f", Runtime: "python3.11"})
		}()
		go func() { defer wg.Done(); deleteErr = db.Namespaces.Delete(ctx, ns) }()
		wg.Wait()
		exists, _ := db.Namespaces.Exists(ctx, ns)
		fns, _ := db.Functions.List(ctx, ns)
		switch {
		case createErr == nil && errors.Is(deleteErr, objects.ErrConflict) && exists && len(fns) == 1:
			outcomes["created, delete refused"]++
		case errors.Is(createErr, objects.ErrNotFound) && deleteErr == nil && !exists && len(fns) == 0:
			outcomes["deleted, create refused"]++
		default:
			t.Fatalf("create: %v, delete: %v, namespace exists %v, %d functions", createErr, deleteErr, exists, len(fns))
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// A status change that only edits a slice in place (a condition's status) is written: the
// "nothing changed" check must not compare the status with itself.
func TestStatusConditionChangeIsWritten(t *testing.T) {
	db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	db.Namespaces.Ensure(ctx, "ns")
	o, err := db.Functions.Create(ctx, "ns", objects.FunctionSpec{Name: "f", Runtime: "python3.11"})
	if err != nil {
		t.Fatal(err)
	}
	set := func(status, reason string) {
		t.Helper()
		if err := db.Functions.UpdateStatus("ns", "f", o.Generation, func(s *lifecycle.FunctionStatus) {
			apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: apiv1.ConditionReady, Status: status, Reason: reason})
		}); err != nil {
			t.Fatal(err)
		}
	}
	set("False", apiv1.ReasonStarting)
	set("True", apiv1.ReasonReady)
	got, err := db.Functions.Get(ctx, "ns", "f")
	if err != nil {
		t.Fatal(err)
	}
	if c := apiv1.FindCondition(got.Status.Conditions, apiv1.ConditionReady); c == nil || c.Status != "True" || c.Reason != apiv1.ReasonReady {
		t.Errorf("Ready condition %+v, want True/Ready", c)
	}
}
