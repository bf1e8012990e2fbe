package k8s_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// tfDir is a copy of an example, applied by the real Terraform CLI as subject.
type tfDir struct {
	t       *testing.T
	dir     string
	env     []string
	subject string
}

func example(t *testing.T, name, subject string) *tfDir {
	t.Helper()
	needCluster(t)
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-r", filepath.Join(testenv.ModuleRoot(), "examples", name)+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v %s", name, err, out)
	}
	tenant(t, subject)
	d := &tfDir{t: t, dir: dir, env: testenv.TerraformEnv(t, cluster.Endpoint, token(t, subject)), subject: subject}
	t.Cleanup(func() {
		cmd := exec.Command(cluster.terraform, "destroy", "-auto-approve", "-input=false", "-no-color")
		cmd.Dir, cmd.Env = d.dir, d.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("terraform destroy: %v\n%s", err, out)
		}
	})
	return d
}

func (d *tfDir) run(args ...string) string {
	d.t.Helper()
	cmd := exec.Command(cluster.terraform, args...)
	cmd.Dir, cmd.Env = d.dir, d.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (d *tfDir) apply() map[string]string {
	d.t.Helper()
	d.run("apply", "-auto-approve", "-input=false", "-no-color")
	var raw map[string]struct{ Value any }
	if err := json.Unmarshal([]byte(d.run("output", "-json")), &raw); err != nil {
		d.t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range raw {
		if s, ok := v.Value.(string); ok {
			out[k] = s
		} else {
			b, _ := json.Marshal(v.Value)
			out[k] = string(b)
		}
	}
	return out
}

func (d *tfDir) write(rel, content string) {
	d.t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, rel), []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

var httpc = &http.Client{Timeout: 10 * time.Second}

func get(url string) (int, string) {
	resp, err := httpc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(url, body string) (int, string) {
	resp, err := httpc.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Python and Node functions from the examples, through Terraform: pods run, /fn/ answers, and
// kubectl shows what the operator made of them.
func TestExamplesOnKubernetes(t *testing.T) {
	t.Parallel()
	py := example(t, "hello-python", subject("python"))
	out := py.apply()
	if code, body := get(out["url"] + "?name=k8s"); code != 200 || !strings.Contains(body, "hello, k8s") {
		t.Fatalf("python /fn/: %d %s", code, body)
	}
	ns := apiv1.NamespaceFor(py.subject)
	pods := kubectl(t, "get", "pods", "-n", ns, "-l", "sless.dev/function=hello-python", "-o", "jsonpath={.items[*].status.phase}")
	if !strings.Contains(pods, "Running") {
		t.Errorf("pods: %q", pods)
	}
	fns := kubectl(t, "get", "functions", "-n", ns)
	for _, want := range []string{"PHASE", "IMAGE", "URL", "hello-python", "Ready", "@sha256:", "/fn/" + ns + "/hello-python"} {
		if !strings.Contains(fns, want) {
			t.Errorf("kubectl get functions lacks %q:\n%s", want, fns)
		}
	}

	node := example(t, "hello-node", subject("node"))
	out = node.apply()
	if code, body := get(out["trigger_url"] + "/x"); code != 200 || !strings.Contains(body, `"path":"/x"`) {
		t.Fatalf("node /fn/: %d %s", code, body)
	}
}
