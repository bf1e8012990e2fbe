package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflogtest"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

// fakeAPI answers what deploy asks of one function "f": the upload, the function's status (Failed
// once uploaded), its events and its build and instance logs.
type fakeAPI struct {
	mu       sync.Mutex
	uploaded bool
	sum      string
	events   []apiv1.Event // recorded once the code is uploaded
	build    []apiv1.LogLine
	inst     []apiv1.LogLine
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ndjson := func(items []any) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, it := range items {
			json.NewEncoder(w).Encode(it)
		}
	}
	const base = "/v1/namespaces/ns/functions/f"
	switch {
	case r.Method == http.MethodPost && r.URL.Path == base+"/upload":
		f.uploaded = true
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(apiv1.UploadResponse{CodeSHA256: f.sum})
	case r.URL.Path == base:
		fn := apiv1.Function{Name: "f", Runtime: "python3.11", Status: apiv1.FunctionStatus{Phase: apiv1.PhaseBuilding}}
		if f.uploaded {
			fn.Status = apiv1.FunctionStatus{Phase: apiv1.PhaseFailed, CodeSHA256: f.sum, Message: "the status's message"}
		}
		json.NewEncoder(w).Encode(fn)
	case r.URL.Path == base+"/events":
		var items []any
		if f.uploaded {
			for _, e := range f.events {
				items = append(items, e)
			}
		}
		ndjson(items)
	case r.URL.Path == base+"/logs":
		lines := f.inst
		if r.URL.Query().Get("source") == apiv1.LogSourceBuild {
			lines = f.build
		}
		if r.URL.Query().Get("tail") != "20" {
			http.Error(w, "tail "+r.URL.Query().Get("tail"), http.StatusBadRequest)
			return
		}
		var items []any
		for _, l := range lines[max(0, len(lines)-20):] {
			items = append(items, l)
		}
		ndjson(items)
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: apiv1.CodeNotFound, Message: r.URL.Path}})
	}
}

// deployFailing runs deploy against api and returns its error and what it logged.
func deployFailing(t *testing.T, api *fakeAPI) (error, string) {
	t.Helper()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "handler.py"), []byte("def handle(e):\n    return 1\n"), 0o644)
	m := functionModel{Name: types.StringValue("f"), SourceDir: types.StringValue(src), CodePath: types.StringNull(),
		CodeSHA256: types.StringUnknown(), BuildTimeoutSec: types.Int64Value(30)}
	_, sum, err := m.code()
	if err != nil {
		t.Fatal(err)
	}
	api.sum = sum
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	c, err := client.New(hs.URL, "tok", client.WithNamespace("ns"))
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	ctx := tflogtest.RootLogger(context.Background(), &logged)
	r := &FunctionResource{c: c}
	err = r.deploy(ctx, &m, r.watchEvents(ctx, "f"), "", true)
	if err == nil {
		t.Fatal("deploy succeeded")
	}
	if m.Phase.ValueString() != string(apiv1.PhaseFailed) {
		t.Errorf("phase %s", m.Phase)
	}
	return err, logged.String()
}

var t0 = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

func ev(sec int, typ, reason, msg string) apiv1.Event {
	return apiv1.Event{Time: t0.Add(time.Duration(sec) * time.Second), Type: typ, Reason: reason, Message: msg}
}

func logLines(n int, inst, stream, prefix string) []apiv1.LogLine {
	var out []apiv1.LogLine
	for i := 1; i <= n; i++ {
		out = append(out, apiv1.LogLine{Time: t0.Add(time.Duration(i) * time.Second), Instance: inst, Stream: stream, Line: fmt.Sprintf("%s %d", prefix, i)})
	}
	return out
}

// A build that fails: the error (Terraform's diagnostic detail) names the stage and the message
// and ends with the build log's last 20 lines; each event was logged as the progress.
func TestDeployBuildFailureDiagnostic(t *testing.T) {
	api := &fakeAPI{
		events: []apiv1.Event{ev(1, apiv1.EventNormal, apiv1.ReasonStored, "code stored"),
			ev(2, apiv1.EventNormal, apiv1.ReasonInstallingDependencies, "pip install -r requirements.txt"),
			ev(3, apiv1.EventWarning, apiv1.ReasonFailed, "dependencies failed: pip exited with status 1")},
		build: logLines(25, "build", apiv1.StreamBuild, "pip output line"),
		inst:  logLines(3, "f-1", apiv1.StreamStdout, "instance line"),
	}
	err, logged := deployFailing(t, api)
	msg := err.Error()
	for _, want := range []string{
		"the function failed at stage InstallingDependencies: dependencies failed: pip exited with status 1\n",
		"last 20 lines of the build log:\n  pip output line 6\n",
		"  pip output line 25",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the diagnostic lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "pip output line 5\n") || strings.Contains(msg, "instance line") {
		t.Errorf("the diagnostic has more than the build log's last 20 lines:\n%s", msg)
	}
	for _, want := range []string{`"stage":"Stored"`, `"stage":"InstallingDependencies"`, `"message":"pip install -r requirements.txt"`,
		`"stage":"Failed"`, `"@level":"info"`} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %s:\n%s", want, logged)
		}
	}
}

// A start that fails: the instances' log, not the build's.
func TestDeployStartFailureDiagnostic(t *testing.T) {
	api := &fakeAPI{
		events: []apiv1.Event{ev(1, apiv1.EventNormal, apiv1.ReasonStored, ""), ev(2, apiv1.EventNormal, apiv1.ReasonBuilt, "image built"),
			ev(3, apiv1.EventNormal, apiv1.ReasonStarting, "starting"), ev(4, apiv1.EventWarning, apiv1.ReasonFailed, "the instance exited (status 1)")},
		build: logLines(5, "build", apiv1.StreamBuild, "build line"),
		inst:  logLines(2, "f-abc", apiv1.StreamStderr, "Traceback line"),
	}
	err, _ := deployFailing(t, api)
	msg := err.Error()
	want := "the function failed at stage Starting: the instance exited (status 1)\nlast 2 lines of the instance log:\n  f-abc Traceback line 1\n  f-abc Traceback line 2"
	if msg != want {
		t.Errorf("diagnostic:\n%s\nwant:\n%s", msg, want)
	}
}
