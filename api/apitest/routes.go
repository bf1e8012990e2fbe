package apitest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/lifecycle"
)

// Every route's happy path, through the typed client, as the CLI and the provider use it.
func testRoutesHappyPath(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	ctx := context.Background()
	c := e.C
	if !strings.HasPrefix(e.NS, "sless-") || len(e.NS) != len("sless-")+16 {
		t.Fatalf("namespace %q", e.NS)
	}
	e.Ensure()

	f, err := c.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11", EnvVars: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Entrypoint != "handler.handle" || f.MemoryMB != 128 || f.TimeoutSec != 30 || f.Status.Phase != apiv1.PhasePending ||
		f.Status.URL != e.Srv.FunctionURL(e.NS, "hello") {
		t.Errorf("created %+v", f)
	}
	if got, err := c.GetFunction(ctx, "hello"); err != nil || got.EnvVars["GREETING"] != "hi" {
		t.Errorf("get: %+v %v", got, err)
	}
	if l, err := c.ListFunctions(ctx); err != nil || len(l) != 1 {
		t.Errorf("list: %v %v", l, err)
	}
	f.MemoryMB, f.TimeoutSec = 256, 60
	if up, err := c.UpdateFunction(ctx, *f); err != nil || up.MemoryMB != 256 || up.TimeoutSec != 60 || up.Status.URL == "" {
		t.Errorf("update: %+v %v", up, err)
	}

	z := ZipOf(t, map[string]string{"handler.py": "def handle(e):\n    return e\n"})
	up, err := c.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z)))
	if err != nil || len(up.CodeSHA256) != 64 || up.Phase != apiv1.PhasePending {
		t.Fatalf("upload: %+v %v", up, err)
	}
	if files := e.StoredFiles(); len(files) != 1 || files[0] != "code/"+e.NS+"/hello/"+up.CodeSHA256+".zip" {
		t.Errorf("stored %v", files)
	}
	// The same zip again: same key, nothing new, no new build (phase untouched by the upload).
	if err := e.Ctrl.SetFunctionStatus(e.NS, "hello", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady }); err != nil {
		t.Fatal(err)
	}
	again, err := c.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z)))
	if err != nil || again.CodeSHA256 != up.CodeSHA256 || again.Phase != apiv1.PhaseReady || len(e.StoredFiles()) != 1 {
		t.Errorf("same zip twice: %+v %v, %d files", again, err, len(e.StoredFiles()))
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }))
	defer upstream.Close()
	e.Ready("hello", upstream.URL)
	for _, path := range []string{"/fn/" + e.NS + "/hello", "/fn/" + e.NS + "/hello/a/b?x=1"} {
		resp, err := http.Get(e.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "ok /"
		if strings.Contains(path, "/a/b") {
			want = "ok /a/b"
		}
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("GET %s: %d %q, want %q", path, resp.StatusCode, b, want)
		}
	}
	inv, err := c.Invocations(ctx, "hello")
	if err != nil || len(inv) != 2 || inv[0].Status != 200 || inv[0].Time.Before(inv[1].Time) || inv[0].RequestID == "" {
		t.Errorf("invocations: %+v %v", inv, err)
	}

	tr, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: apiv1.TriggerHTTP, FunctionRef: "hello"})
	if err != nil || !tr.IsEnabled() || tr.Status.URL != e.Srv.FunctionURL(e.NS, "hello") || !tr.Status.Active {
		t.Fatalf("create trigger: %+v %v", tr, err)
	}
	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "nightly", Type: apiv1.TriggerCron, FunctionRef: "hello", Schedule: "0 3 * * *"}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListTriggers(ctx); err != nil || len(l) != 2 {
		t.Errorf("list triggers: %v %v", l, err)
	}
	if off, err := c.SetTriggerEnabled(ctx, "web", false); err != nil || off.IsEnabled() || off.Status.Active {
		t.Errorf("disable: %+v %v", off, err)
	}
	if got, err := c.GetTrigger(ctx, "web"); err != nil || got.IsEnabled() {
		t.Errorf("get trigger: %+v %v", got, err)
	}
	if err := c.DeleteTrigger(ctx, "nightly"); err != nil {
		t.Error(err)
	}

	j, err := c.CreateJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", EventJSON: `{"input":[100,200,300]}`, RunID: 1})
	if err != nil || j.Status.Phase != apiv1.JobPending {
		t.Fatalf("create job: %+v %v", j, err)
	}
	skipped, err := c.CreateJob(ctx, apiv1.Job{Name: "later", FunctionRef: "hello"})
	if err != nil || skipped.Status.Phase != apiv1.JobSkipped {
		t.Errorf("run_id 0: %+v %v", skipped, err)
	}
	if got, err := c.GetJob(ctx, "sum"); err != nil || got.EventJSON != `{"input":[100,200,300]}` {
		t.Errorf("get job: %+v %v", got, err)
	}
	if err := e.Ctrl.SetJobStatus(e.NS, "sum", func(s *apiv1.JobStatus) {
		*s = apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 1, Message: `{"sum": 600}`}
	}); err != nil {
		t.Fatal(err)
	}
	same, err := c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", EventJSON: `{"input":[1]}`, RunID: 1})
	if err != nil || same.Status.Phase != apiv1.JobSucceeded || same.EventJSON != `{"input":[100,200,300]}` {
		t.Errorf("equal run_id must change nothing: %+v %v", same, err)
	}
	rerun, err := c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", EventJSON: `{"input":[1,2]}`, RunID: 2})
	if err != nil || rerun.Status.Phase != apiv1.JobPending || rerun.RunID != 2 || rerun.Status.LastRunID != 1 {
		t.Errorf("higher run_id: %+v %v", rerun, err)
	}
	var ae *apiv1.Error
	if _, err := c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", RunID: 1}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("lower run_id: %v", err)
	}
	for _, n := range []string{"sum", "later"} {
		if err := c.DeleteJob(ctx, n); err != nil {
			t.Error(err)
		}
	}

	// A namespace with functions cannot be deleted; an empty one can.
	if err := c.DeleteNamespace(ctx); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != apiv1.CodeConflict {
		t.Errorf("delete namespace with functions: %v", err)
	}
	if err := c.DeleteFunction(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if files := e.StoredFiles(); len(files) != 0 {
		t.Errorf("delete left code behind: %v", files)
	}
	if err := c.DeleteNamespace(ctx); err != nil {
		t.Errorf("delete empty namespace: %v", err)
	}
	if ok, _ := e.Be.Namespaces.Exists(ctx, e.NS); ok {
		t.Error("namespace still exists")
	}
}

func testCreateConflictsAndMissing(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	ctx := context.Background()
	// Before ensure, creating in the namespace says how to fix it.
	_, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "a", Runtime: "nodejs20"})
	if !client.IsNotFound(err) || !strings.Contains(err.Error(), "ensure") {
		t.Errorf("create before ensure: %v", err)
	}
	e.Ensure()
	e.Function("a")
	if _, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "a", Runtime: "nodejs20"}); !client.IsAlreadyExists(err) {
		t.Errorf("duplicate create: %v", err)
	}
	for _, call := range []func() error{
		func() error { return e.C.DeleteFunction(ctx, "missing") },
		func() error { _, err := e.C.GetFunction(ctx, "missing"); return err },
		func() error { return e.C.DeleteTrigger(ctx, "missing") },
		func() error { return e.C.DeleteJob(ctx, "missing") },
		func() error { _, err := e.C.Invocations(ctx, "missing"); return err },
		func() error { _, err := e.C.Upload(ctx, "missing", bytes.NewReader([]byte("x")), 1); return err },
		func() error { _, err := e.C.SetTriggerEnabled(ctx, "missing", true); return err },
	} {
		if err := call(); !client.IsNotFound(err) {
			t.Errorf("want not_found, got %v", err)
		}
	}
	if _, err := e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "t", Type: "http", FunctionRef: "nope"}); err == nil || !strings.Contains(err.Error(), "no such function") {
		t.Errorf("trigger for a missing function: %v", err)
	}
	if l, _ := e.Be.Triggers.List(ctx, e.NS); len(l) != 0 {
		t.Errorf("stored %v", l)
	}
}
