package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// A runtime blocked on a real single host, end to end: `sless up` runs a nodejs20 function (made
// by the real CLI) and a Terraform-managed one, then restarts on the same data dir with
// --block-runtime nodejs20. The running functions keep serving the images they had; the catalog
// says blocked; a new nodejs20 function is refused (400 naming nodejs22) through the API, the real
// CLI and the real Terraform CLI, none of which leaves a function behind; an in-place update of an
// existing one (API, CLI) is admitted with a warning naming nodejs22 and its new code serves; and
// moving the Terraform one to nodejs22 is one attribute changed, applied in place.
func TestAccRuntimeBlocked(t *testing.T) {
	u := acc(t)
	ctx := context.Background()
	ns := u.Client.Namespace()
	slessBin := testenv.SlessBinary(t)
	home := t.TempDir()
	cliEnv := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"SLESS_ENDPOINT="+u.URL, "SLESS_API_TOKEN="+u.Token)
	sless := func(args ...string) (int, string, string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, slessBin, args...)
		cmd.Env = cliEnv
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), o.String(), e.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, o.String(), e.String()
	}
	codeDir := func(body string) string {
		d := filepath.Join(t.TempDir(), "code")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "handler.js"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// fnAnswers polls /fn/ until the function answers 200 with want, or the deadline passes.
	fnAnswers := func(name, want string) error {
		deadline := time.Now().Add(90 * time.Second)
		for {
			code, body := u.Get("/fn/" + ns + "/" + name)
			if code == 200 && strings.Contains(body, want) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("/fn/%s/%s answered %d %q, want 200 with %q", ns, name, code, body, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// api sends a request with the dev token and returns the answer, its body read.
	api := func(method, path string, in any) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if in != nil {
			b, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, u.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+u.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	notCreated := func(name string) error {
		if f, err := u.Client.GetFunction(ctx, name); !client.IsNotFound(err) {
			return fmt.Errorf("function %s: %+v %v, want not found", name, f, err)
		}
		return nil
	}

	tfSrc := codeDir("exports.handle = async () => ({ tf: 'moved', node: process.versions.node });\n")
	freshSrc := codeDir("exports.handle = async () => ({ tf: 'fresh' });\n")
	moved := func(rt string) string {
		return fmt.Sprintf(`
resource "sless_function" "moved" {
  name       = "tf-moved"
  runtime    = %q
  source_dir = %q
}
`, rt, tfSrc)
	}
	fresh := fmt.Sprintf(`
resource "sless_function" "fresh" {
  name       = "tf-fresh"
  runtime    = "nodejs20"
  source_dir = %q
}
`, freshSrc)
	// The provider block names the endpoint and the dev token: the restart keeps the address, and
	// the token (signed with the data dir's key) stays valid.
	provider := providerBlock(u)

	blocked := func() {
		// 1. Before the block: a nodejs20 function deployed by the real CLI answers.
		code, stdout, stderr := sless("fn", "deploy", codeDir("exports.handle = async () => ({ v: 'one' });\n"), "--name", "legacy", "--runtime", "nodejs20")
		if code != 0 || !strings.Contains(stdout, "function legacy is Ready") {
			t.Fatalf("deploy legacy on nodejs20 (not blocked): exit %d %q\n%s", code, stdout, stderr)
		}
		if err := fnAnswers("legacy", `"v":"one"`); err != nil {
			t.Fatal(err)
		}
		f, err := u.Client.GetFunction(ctx, "legacy")
		if err != nil || !strings.Contains(f.Status.Image, "@sha256:") {
			t.Fatalf("legacy: %+v %v", f, err)
		}
		legacyImage, legacyBuilt := f.Status.Image, f.Status.LastBuiltAt
		if legacyBuilt == nil {
			t.Fatalf("legacy has no last_built_at: %+v", f.Status)
		}

		// 2. The same data dir, nodejs20 blocked.
		listen, regAddr, dataDir, first := u.Listen, u.RegAddr, u.DataDir, u.Client
		u.Stop()
		*u = *testenv.StartSlessUp(t, dataDir, listen, regAddr, "--block-runtime", "nodejs20")
		// The CLI's environment and the provider block keep the first run's endpoint and token.
		if _, err := first.ListFunctions(ctx); err != nil || u.URL != "http://"+listen {
			t.Fatalf("after the restart (%s) the first run's endpoint and token do not work: %v", u.URL, err)
		}

		// 3a. The running function keeps its image and answers.
		if err := fnAnswers("legacy", `"v":"one"`); err != nil {
			t.Error(err)
		}
		if f, err := u.Client.GetFunction(ctx, "legacy"); err != nil || f.Status.Image != legacyImage || f.Status.Phase != apiv1.PhaseReady ||
			f.Status.LastBuiltAt == nil || !f.Status.LastBuiltAt.Equal(*legacyBuilt) {
			t.Errorf("legacy after the block: %+v %v, want Ready on %s built at %s (no rebuild)", f, err, legacyImage, legacyBuilt)
		}

		// 3b. The catalog says blocked, naming the replacement.
		resp, body := api(http.MethodGet, "/v1/runtimes", nil)
		var list struct {
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal([]byte(body), &list); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET /v1/runtimes: %d %s %v", resp.StatusCode, body, err)
		}
		i := slices.IndexFunc(list.Items, func(r map[string]any) bool { return r["name"] == "nodejs20" })
		if i < 0 || list.Items[i]["status"] != "blocked" || list.Items[i]["replacement"] != "nodejs22" {
			t.Errorf("GET /v1/runtimes: nodejs20 is not blocked with replacement nodejs22: %s", body)
		}
		if j := slices.IndexFunc(list.Items, func(r map[string]any) bool { return r["name"] == "nodejs22" }); j < 0 || list.Items[j]["status"] != "supported" {
			t.Errorf("GET /v1/runtimes: nodejs22 is not supported: %s", body)
		}

		// 3c. A new function on it: 400 naming the replacement, nothing created.
		resp, body = api(http.MethodPost, "/v1/namespaces/"+ns+"/functions", apiv1.Function{Name: "api-new", Runtime: "nodejs20"})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "runtime nodejs20 is blocked") || !strings.Contains(body, "nodejs22") {
			t.Errorf("POST a nodejs20 function: %d %s, want 400 naming nodejs22", resp.StatusCode, body)
		}
		if err := notCreated("api-new"); err != nil {
			t.Error(err)
		}

		// 3d. The existing one updated in place: admitted with a warning naming the replacement,
		// and its new code serves.
		cur, err := u.Client.GetFunction(ctx, "legacy")
		if err != nil {
			t.Fatal(err)
		}
		spec := *cur
		spec.Status = apiv1.FunctionStatus{}
		spec.EnvVars = map[string]string{"UPDATED": "yes"}
		resp, body = api(http.MethodPut, "/v1/namespaces/"+ns+"/functions/legacy", spec)
		warnings := apiv1.ParseWarnings(resp.Header.Values("Warning"))
		if resp.StatusCode != 200 || !mentions(warnings, "runtime nodejs20 is blocked", "move to nodejs22") ||
			!strings.HasPrefix(resp.Header.Get("Warning"), "299 ") {
			t.Errorf("PUT legacy (nodejs20, in place): %d, Warning %q, %s; want 200 with a 299 warning naming nodejs22", resp.StatusCode, resp.Header.Values("Warning"), body)
		}
		z := testenv.Zip(map[string]string{"handler.js": "exports.handle = async () => ({ v: 'two', updated: process.env.UPDATED });\n"})
		up, err := u.Client.Upload(ctx, "legacy", bytes.NewReader(z), int64(len(z)))
		if err != nil {
			t.Fatalf("uploading legacy's new code: %v", err)
		}
		if err := fnAnswers("legacy", `"v":"two","updated":"yes"`); err != nil {
			t.Error(err)
		}
		if f, err := u.Client.GetFunction(ctx, "legacy"); err != nil || f.Status.CodeSHA256 != up.CodeSHA256 || f.Runtime != "nodejs20" {
			t.Errorf("legacy after the update: %+v %v", f, err)
		}

		// The same through the real CLI: a redeploy of legacy with new code succeeds, its warning
		// on stderr.
		code, stdout, stderr = sless("fn", "deploy", codeDir("exports.handle = async () => ({ v: 'three' });\n"), "--name", "legacy")
		if code != 0 || !strings.Contains(stdout, "function legacy is Ready") ||
			!strings.Contains(stderr, "Warning: runtime nodejs20 is blocked") || !strings.Contains(stderr, "move to nodejs22") {
			t.Errorf("sless fn deploy legacy (nodejs20 blocked, in place): exit %d %q\n%s; want success with a warning naming nodejs22", code, stdout, stderr)
		}
		if err := fnAnswers("legacy", `"v":"three"`); err != nil {
			t.Error(err)
		}

		// 3e. The real CLI: a new function on nodejs20 fails naming the replacement, and nothing
		// it sent created the function (no upload either).
		before := len(u.Log())
		code, stdout, stderr = sless("fn", "deploy", codeDir("exports.handle = async () => ({ v: 'cli' });\n"), "--name", "cli-new", "--runtime", "nodejs20")
		if code == 0 || !strings.Contains(stderr, "runtime nodejs20 is blocked") || !strings.Contains(stderr, "nodejs22") {
			t.Errorf("sless fn deploy --runtime nodejs20 (blocked): exit %d %q\n%s; want non-zero naming nodejs22", code, stdout, stderr)
		}
		if err := notCreated("cli-new"); err != nil {
			t.Error(err)
		}
		if log := u.Log()[before:]; strings.Contains(log, "/functions/cli-new/upload") || strings.Contains(log, `"method":"PUT"`) {
			t.Errorf("the CLI sent a write beyond the refused create:\n%s", log)
		}
	}

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{ // before the block: a Terraform-managed function on nodejs20
				Config: provider + moved("nodejs20"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.moved", "runtime", "nodejs20"),
					resource.TestCheckResourceAttr("sless_function.moved", "phase", "Ready"),
					servesBody(u, "tf-moved", `"node":"20.`),
				),
			},
			{ // blocked: a new function on nodejs20 fails at apply, naming the replacement
				PreConfig:   blocked,
				Config:      provider + moved("nodejs20") + fresh,
				ExpectError: regexp.MustCompile(`runtime\s+nodejs20\s+is\s+blocked[\s\S]*nodejs22`),
			},
			{ // one attribute: nodejs20 to nodejs22, in place, while nodejs20 is blocked
				PreConfig: func() {
					if err := notCreated("tf-fresh"); err != nil {
						t.Error(err)
					}
				},
				Config: provider + moved("nodejs22"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.moved", plancheck.ResourceActionUpdate),
					onlyChanges{"sless_function.moved"}, // the refused fresh is not in state (nothing to delete)
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.moved", "runtime", "nodejs22"),
					resource.TestCheckResourceAttr("sless_function.moved", "phase", "Ready"),
					servesBody(u, "tf-moved", `"node":"22.`),
					func(*terraform.State) error { return notCreated("tf-fresh") },
				),
			},
		},
	})
}

// onlyChanges is a plan check: the plan changes (creates, updates, deletes) only these resources.
type onlyChanges []string

func (o onlyChanges) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Change != nil && !rc.Change.Actions.NoOp() && !rc.Change.Actions.Read() && !slices.Contains(o, rc.Address) {
			resp.Error = fmt.Errorf("the plan also changes %s (%v)", rc.Address, rc.Change.Actions)
			return
		}
	}
}
