package k8s_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
)

// The provided runtime on Kubernetes: examples/hello-go's static binary (built here with the
// machine's Go, as the example says) applied through Terraform answers /fn/ from a restricted pod
// (uid 65532, read-only root), and runs as a job, its result read from $TERMINATION_LOG and its
// failure from its output.
func TestProvidedOnKubernetes(t *testing.T) {
	t.Parallel()
	d := example(t, "hello-go", subject("provided"))
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(d.dir, "code", "bootstrap"), ".")
	build.Dir, build.Env = filepath.Join(d.dir, "src"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hello-go: %v\n%s", err, out)
	}
	out := d.apply()
	code, body := get(out["url"] + "/k8s/path?name=k8s")
	var got map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got["message"] != "hello from go, k8s" || got["path"] != "/k8s/path" ||
		got["euid"] != float64(65532) {
		t.Fatalf("provided /fn/: %d %s", code, body)
	}
	ns := apiv1.NamespaceFor(d.subject)
	if img := deployment(t, ns, "hello-go").Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, "@sha256:") {
		t.Errorf("deployment image %q", img)
	}

	// The example's tenant, without a second cleanup (its namespace goes after terraform destroy).
	c, err := apiclient.New(cluster.Endpoint, token(t, d.subject))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(id int64, event string) *apiv1.Job {
		t.Helper()
		var err error
		if id == 1 {
			_, err = c.CreateJob(ctx, apiv1.Job{Name: "gosum", FunctionRef: "hello-go", EventJSON: event, RunID: id})
		} else {
			_, err = c.PutJob(ctx, apiv1.Job{Name: "gosum", FunctionRef: "hello-go", EventJSON: event, RunID: id})
		}
		if err != nil {
			t.Fatal(err)
		}
		var j *apiv1.Job
		waitFor(t, "the provided job", 2*time.Minute, func() bool {
			j, _ = c.GetJob(ctx, "gosum")
			return j != nil && j.Status.LastRunID == id && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed)
		})
		return j
	}
	if j := run(1, `{"input":[100,200,300]}`); j.Status.Phase != apiv1.JobSucceeded || j.Status.Message != `{"sum":600}` {
		t.Errorf("job %+v", j.Status)
	}
	if j := run(2, `{"input":["x"]}`); j.Status.Phase != apiv1.JobFailed || !strings.Contains(j.Status.Message, "not a number") {
		t.Errorf("failing job %+v", j.Status)
	}
	if err := c.DeleteJob(ctx, "gosum"); err != nil {
		t.Error(err)
	}
}
