package provider_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sless-dev/sless/internal/testenv"
)

// TestExamples applies every examples/ configuration the way a user does: the real terraform CLI,
// the provider binary at the seed's source address through dev_overrides, env-configured endpoint
// and token. Each must apply, answer, plan empty afterwards and destroy.
func TestExamples(t *testing.T) {
	tf, err := testenv.Tool("terraform")
	if err != nil {
		testenv.Missing(t, "the terraform CLI (hack/install-go-tools.sh terraform)", err)
	}
	u := testenv.StartSlessUp(t, t.TempDir(), "", "")
	env := testenv.TerraformEnv(t, u.URL, u.Token)
	for _, tc := range []struct {
		example string
		check   func(t *testing.T, outputs map[string]string)
	}{
		{"hello-python", func(t *testing.T, o map[string]string) {
			code, body := u.Get(strings.TrimPrefix(o["url"], u.URL) + "?name=tf")
			if code != 200 || !strings.Contains(body, "hello, tf") {
				t.Errorf("url %s: %d %s", o["url"], code, body)
			}
			if !strings.Contains(o["image"], "@sha256:") {
				t.Errorf("image %q", o["image"])
			}
		}},
		{"hello-node", func(t *testing.T, o map[string]string) {
			if code, body := u.Get(strings.TrimPrefix(o["trigger_url"], u.URL) + "/x"); code != 200 || !strings.Contains(body, `"path":"/x"`) {
				t.Errorf("trigger_url: %d %s", code, body)
			}
		}},
		{"cron", func(t *testing.T, o map[string]string) {
			if o["schedule"] != "0 9 * * *" {
				t.Errorf("schedule %q", o["schedule"])
			}
		}},
		{"job", func(t *testing.T, o map[string]string) {
			var res map[string]any
			if err := json.Unmarshal([]byte(o["job_result"]), &res); err != nil || res["sum"] != float64(600) {
				t.Errorf("job_result %q, want {\"sum\":600}", o["job_result"])
			}
		}},
		{"hello-go", func(t *testing.T, o map[string]string) {
			code, body := u.Get(strings.TrimPrefix(o["url"], u.URL) + "/any/path?name=tf")
			var got map[string]any
			if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got["message"] != "hello from go, tf" || got["path"] != "/any/path" || got["runtime"] != "provided" {
				t.Errorf("url %s: %d %s", o["url"], code, body)
			}
			if !strings.Contains(o["image"], "@sha256:") {
				t.Errorf("image %q", o["image"])
			}
		}},
		{"secrets", func(t *testing.T, o map[string]string) {
			code, body := u.Get(strings.TrimPrefix(o["url"], u.URL))
			// len("example-token-0123456789"), sha256 of the example certificate
			if code != 200 || !strings.Contains(body, `"token_length": 24`) || !strings.Contains(body, `"cert_sha256": "`+sha256Hex("-----BEGIN CERTIFICATE-----\nexample\n-----END CERTIFICATE-----\n")+`"`) {
				t.Errorf("url %s: %d %s", o["url"], code, body)
			}
			if o["api_secret_version"] != "1" {
				t.Errorf("api_secret_version %q", o["api_secret_version"])
			}
		}},
	} {
		t.Run(tc.example, func(t *testing.T) { applyExample(t, tf, u, env, tc.example, tc.check) })
	}
	// With a broker of its own, and a sless up that may connect to it (--allow-broker: a broker on
	// this host is refused otherwise).
	t.Run("orders-rabbitmq", func(t *testing.T) {
		mq := testenv.StartRabbitMQ(t)
		u := testenv.StartSlessUp(t, t.TempDir(), "", "", "--allow-broker", mq.Addr())
		env := append(testenv.TerraformEnv(t, u.URL, u.Token), "TF_VAR_broker_url="+mq.URL())
		applyExample(t, tf, u, env, "orders-rabbitmq", func(t *testing.T, o map[string]string) { checkOrders(t, u, mq, o) })
	})
}

// applyExample copies examples/<example> and runs it as a user does: apply, check its outputs,
// plan (which must be empty), destroy.
func applyExample(t *testing.T, tf string, u *testenv.SlessUp, env []string, example string, check func(t *testing.T, outputs map[string]string)) {
	run := func(t *testing.T, dir string, args ...string) (string, int) {
		cmd := exec.Command(tf, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), code
	}
	dir := t.TempDir()
	if out, err := exec.Command("cp", "-r", filepath.Join(testenv.ModuleRoot(), "examples", example)+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying: %v %s", err, out)
	}
	if example == "hello-go" {
		buildHelloGo(t, dir)
	}
	if out, code := run(t, dir, "apply", "-auto-approve", "-input=false"); code != 0 {
		t.Fatalf("terraform apply: exit %d\n%s\n%s", code, out, u.LogTail())
	}
	out, _ := run(t, dir, "output", "-json")
	var raw map[string]struct{ Value any }
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &raw); err != nil {
		t.Fatalf("terraform output: %v\n%s", err, out)
	}
	outputs := map[string]string{}
	for k, v := range raw {
		outputs[k] = strings.Trim(strings.TrimSpace(jsonString(v.Value)), "\"")
	}
	check(t, outputs)
	if out, code := run(t, dir, "plan", "-detailed-exitcode", "-input=false"); code != 0 {
		t.Errorf("plan after apply is not empty (exit %d):\n%s", code, out)
	}
	if out, code := run(t, dir, "destroy", "-auto-approve", "-input=false"); code != 0 {
		t.Fatalf("terraform destroy: exit %d\n%s", code, out)
	}
	if fs, _ := u.Client.ListFunctions(t.Context()); len(fs) != 0 {
		t.Errorf("functions left after destroy: %v", fs)
	}
	if ts, _ := u.Client.ListTriggers(t.Context()); len(ts) != 0 {
		t.Errorf("triggers left after destroy: %v", ts)
	}
}

// buildHelloGo builds examples/hello-go's server with the machine's Go into the example's code
// dir, as its README says: the binary is never committed.
func buildHelloGo(t *testing.T, dir string) {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "code", "bootstrap"), ".")
	cmd.Dir, cmd.Env = filepath.Join(dir, "src"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building hello-go: %v\n%s", err, out)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func jsonString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
