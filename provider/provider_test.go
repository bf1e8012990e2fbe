package provider_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/provider"
)

var factories = map[string]func() (tfprotov6.ProviderServer, error){
	"sless": providerserver.NewProtocol6WithError(provider.New("test")()),
}

// acc prepares a real Terraform CLI (built by hack/) and a real `sless up`.
func acc(t *testing.T) *testenv.SlessUp {
	t.Helper()
	tf, err := testenv.Tool("terraform")
	if err != nil {
		testenv.Missing(t, "the terraform CLI (hack/install-go-tools.sh terraform)", err)
	}
	t.Setenv("TF_ACC", "1")
	t.Setenv("TF_ACC_TERRAFORM_PATH", tf)
	t.Setenv("CHECKPOINT_DISABLE", "1") // Terraform must not call home
	t.Setenv("TF_IN_AUTOMATION", "1")
	return testenv.StartSlessUp(t, t.TempDir(), "", "")
}

func providerBlock(u *testenv.SlessUp) string {
	return fmt.Sprintf("provider \"sless\" {\n  endpoint = %q\n  token    = %q\n}\n", u.URL, u.Token)
}

func writeCode(t *testing.T, dir, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// servesBody checks that the function's URL answers with a body containing want.
func servesBody(u *testenv.SlessUp, name, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		code, body := u.Get("/fn/" + u.Client.Namespace() + "/" + name)
		if code != 200 || !strings.Contains(body, want) {
			return fmt.Errorf("/fn/ answered %d %q, want 200 with %q", code, body, want)
		}
		return nil
	}
}

func TestAccFunction(t *testing.T) {
	u := acc(t)
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, "import os\ndef handle(event):\n    return {'v': 1, 'env': os.environ.get('MODE')}\n")
	config := func(env string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_function" "f" {
  name       = "tf-hello"
  runtime    = "python3.11"
  source_dir = %q
  memory_mb  = 128
  env_vars   = { MODE = %q }
}
`, src, env)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := u.Client.GetFunction(context.Background(), "tf-hello"); err == nil {
				return fmt.Errorf("tf-hello still exists after destroy")
			}
			return nil
		},
		Steps: []resource.TestStep{
			{ // create
				Config: config("a"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					resource.TestCheckResourceAttr("sless_function.f", "entrypoint", "handler.handle"),
					checkScale("sless_function.f", 0, 10, 10, 300), // the defaults, read back
					resource.TestCheckResourceAttr("sless_function.f", "namespace", u.Client.Namespace()),
					resource.TestCheckResourceAttr("sless_function.f", "url", u.URL+"/fn/"+u.Client.Namespace()+"/tf-hello"),
					resource.TestMatchResourceAttr("sless_function.f", "image", regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)),
					resource.TestMatchResourceAttr("sless_function.f", "code_sha256", regexp.MustCompile(`^[0-9a-f]{64}$`)),
					servesBody(u, "tf-hello", `"v": 1, "env": "a"`),
				),
			},
			{ // a code change is one in-place update, and the new code answers
				PreConfig: func() {
					writeCode(t, src, "import os\ndef handle(event):\n    return {'v': 2, 'env': os.environ.get('MODE')}\n")
				},
				Config: config("a"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("sless_function.f", tfjsonPath("image")),
					plancheck.ExpectUnknownValue("sless_function.f", tfjsonPath("replicas")), // ModifyPlan's, not the framework's
				}},
				Check: servesBody(u, "tf-hello", `"v": 2`),
			},
			{ // env vars change in place; the image stays
				Config: config("b"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("sless_function.f", tfjsonPath("phase"), knownString("Ready")),
				}},
				Check: servesBody(u, "tf-hello", `"env": "b"`),
			},
			{ // import by name
				ResourceName:            "sless_function.f",
				ImportState:             true,
				ImportStateId:           "tf-hello",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source_dir", "build_timeout_sec"},
			},
			{ // deleted out of band: the plan is not empty
				PreConfig: func() {
					if err := u.Client.DeleteFunction(context.Background(), "tf-hello"); err != nil {
						t.Fatal(err)
					}
				},
				Config:             config("b"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{ // and apply re-creates it
				Config: config("b"),
				Check:  servesBody(u, "tf-hello", `"v": 2`),
			},
		},
	})
}

func TestAccTriggerAndJob(t *testing.T) {
	u := acc(t)
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, "def handle(event):\n    if 'input' in event:\n        return {'sum': sum(event['input'])}\n    return {'ok': True}\n")
	config := func(enabled bool, runID int, input string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_function" "f" {
  name       = "tf-jobs"
  runtime    = "python3.11"
  source_dir = %q
}
resource "sless_trigger" "web" {
  name         = "tf-web"
  function_ref = sless_function.f.name
  type         = "http"
  enabled      = %v
}
resource "sless_trigger" "daily" {
  name         = "tf-daily"
  function_ref = sless_function.f.name
  type         = "cron"
  schedule     = "0 9 * * *"
}
data "sless_function" "f" {
  name       = sless_function.f.name
  depends_on = [sless_function.f]
}
resource "sless_job" "run" {
  name         = "tf-run"
  function_ref = sless_function.f.name
  run_id       = %d
  event_json   = jsonencode({ input = %s })
}
`, src, enabled, runID, input)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: config(true, 1, "[100, 200, 300]"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_trigger.web", "trigger_url", u.URL+"/fn/"+u.Client.Namespace()+"/tf-jobs"),
					resource.TestCheckResourceAttr("sless_trigger.web", "enabled", "true"),
					resource.TestCheckResourceAttr("sless_trigger.daily", "schedule", "0 9 * * *"),
					resource.TestCheckResourceAttr("sless_job.run", "phase", "Succeeded"),
					resource.TestCheckResourceAttr("data.sless_function.f", "phase", "Ready"),
					resource.TestCheckResourceAttrPair("data.sless_function.f", "image", "sless_function.f", "image"),
					resource.TestMatchResourceAttr("sless_job.run", "job_message", regexp.MustCompile(`"sum": 600`)),
					servesBody(u, "tf-jobs", `"ok": true`),
				),
			},
			{ // disable in place: /fn/ answers 503
				Config: config(false, 1, "[100, 200, 300]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_trigger.web", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					if code, body := u.Get("/fn/" + u.Client.Namespace() + "/tf-jobs"); code != 503 {
						return fmt.Errorf("disabled: %d %s", code, body)
					}
					return nil
				},
			},
			{ // raising run_id runs again, in place
				Config: config(true, 2, "[1, 2, 3]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_job.run", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestMatchResourceAttr("sless_job.run", "job_message", regexp.MustCompile(`"sum": 6`)),
					resource.TestCheckResourceAttr("sless_job.run", "run_id", "2"),
				),
			},
			{ResourceName: "sless_trigger.daily", ImportState: true, ImportStateId: "tf-daily", ImportStateVerify: true},
			{ResourceName: "sless_job.run", ImportState: true, ImportStateId: "tf-run", ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"event_json", "wait_timeout_sec"}},
		},
	})
}

func TestAccBadConfig(t *testing.T) {
	u := acc(t)
	src := t.TempDir()
	writeCode(t, src, "def handle(e):\n    return 1\n")
	for _, tc := range []struct {
		name, hcl, want string
		apply           bool // refused by the server at apply (the provider checks only apiv1's rules at plan)
	}{
		{"unknown runtime", `resource "sless_function" "f" {
  name = "x"
  runtime = "ruby3"
  source_dir = "` + src + `"
}`, `runtime "ruby3" is not supported`, false},
		{"bad name", `resource "sless_function" "f" {
  name = "Bad_Name"
  runtime = "python3.11"
  source_dir = "` + src + `"
}`, `name "Bad_Name" is invalid`, false},
		{"memory out of range", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  memory_mb = 16
  source_dir = "` + src + `"
}`, `(?s)memory_mb.*between 64 and 8192`, false},
		{"min replicas -1", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  min_replicas = -1
  source_dir = "` + src + `"
}`, `(?s)min_replicas.*between\s+0\s+and\s+100,\s+got:\s+-1`, false},
		{"min replicas 101", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  min_replicas = 101
  source_dir = "` + src + `"
}`, `(?s)min_replicas.*between\s+0\s+and\s+100,\s+got:\s+101`, false},
		{"max replicas 0", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  max_replicas = 0
  source_dir = "` + src + `"
}`, `(?s)max_replicas.*between\s+1\s+and\s+100,\s+got:\s+0`, false},
		{"max replicas 101", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  max_replicas = 101
  source_dir = "` + src + `"
}`, `(?s)max_replicas.*between\s+1\s+and\s+100,\s+got:\s+101`, false},
		{"concurrency 0", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  concurrency = 0
  source_dir = "` + src + `"
}`, `(?s)concurrency.*between\s+1\s+and\s+1000,\s+got:\s+0`, false},
		{"concurrency 1001", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  concurrency = 1001
  source_dir = "` + src + `"
}`, `(?s)concurrency.*between\s+1\s+and\s+1000,\s+got:\s+1001`, false},
		{"idle timeout sec 4", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  idle_timeout_sec = 4
  source_dir = "` + src + `"
}`, `(?s)idle_timeout_sec.*between\s+5\s+and\s+86400,\s+got:\s+4`, false},
		{"idle timeout sec 86401", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  idle_timeout_sec = 86401
  source_dir = "` + src + `"
}`, `(?s)idle_timeout_sec.*between\s+5\s+and\s+86400,\s+got:\s+86401`, false},
		{"max below min", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  min_replicas = 20
  max_replicas = 5
  source_dir = "` + src + `"
}`, `max_replicas 5 is below min_replicas 20`, true},
		{"bad entrypoint", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  entrypoint = "nodot"
  source_dir = "` + src + `"
}`, `entrypoint "nodot" must look like`, false},
		{"no code", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
}`, `(?s)source_dir.*code_path|code_path.*source_dir`, false},
		{"secret_env bad name", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  secret_env = { "1BAD" = "db/url" }
}`, `(?s)secret_env\s+name\s+"1BAD"\s+is\s+invalid`, false},
		{"secret_env platform name", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  secret_env = { SLESS_TOKEN = "db/url" }
}`, `(?s)"SLESS_TOKEN"\s+is\s+set\s+by\s+the\s+platform`, false},
		{"secret_env bad reference", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  secret_env = { DB_URL = "db" }
}`, `(?s)secret_env\s+DB_URL:\s+secret\s+reference\s+"db"\s+must\s+be\s+SECRET/KEY`, false},
		{"secret_files outside /var/run/secrets", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  secret_files = { "/etc/db" = "db" }
}`, `(?s)secret_files\s+path\s+"/etc/db"\s+must\s+be\s+a\s+directory\s+under`, false},
		{"secret_files bad secret name", `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  secret_files = { "/var/run/secrets/db" = "Bad_Name" }
}`, `(?s)secret_files\s+/var/run/secrets/db:\s+secret\s+name\s+"Bad_Name"\s+is\s+invalid`, false},
		{"secret bad key", `resource "sless_secret" "s" {
  name = "s"
  data = { "bad-key" = "v" }
}`, `(?s)secret\s+key\s+"bad-key"\s+is\s+invalid`, false},
		{"secret no keys", `resource "sless_secret" "s" {
  name = "s"
  data = {}
}`, `(?s)at\s+least\s+one\s+key`, false},
		{"secret bad name", `resource "sless_secret" "s" {
  name = "Bad_Name"
  data = { K = "v" }
}`, `name "Bad_Name" is invalid`, false},
		{"bad cron", `resource "sless_trigger" "t" {
  name = "t"
  function_ref = "x"
  type = "cron"
  schedule = "every day at nine"
}`, `(?s)not\s+a\s+5-field\s+cron\s+expression`, true},
		{"bad trigger type", `resource "sless_trigger" "t" {
  name = "t"
  function_ref = "x"
  type = "kafka"
}`, `value must be one of`, false},
		{"bad event json", `resource "sless_job" "j" {
  name = "j"
  function_ref = "x"
  event_json = "{oops"
}`, `not valid JSON`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      providerBlock(u) + tc.hcl,
					PlanOnly:    !tc.apply,
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
	if fs, _ := u.Client.ListFunctions(context.Background()); len(fs) != 0 {
		t.Errorf("bad configurations created %v", fs)
	}
	if ss, _ := u.Client.ListSecrets(context.Background()); len(ss) != 0 {
		t.Errorf("bad configurations created secrets %v", ss)
	}
}

func TestAccNubesEndpointAndCodePath(t *testing.T) {
	u := acc(t)
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+u.Token {
			t.Errorf("nubes_endpoint got Authorization %q", r.Header.Get("Authorization"))
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer refuse.Close()
	accept := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer accept.Close()

	dir := t.TempDir()
	zipPath := filepath.Join(dir, "code.zip")
	writeZip := func(body string) {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("handler.py")
		w.Write([]byte(body))
		zw.Close()
		os.WriteFile(zipPath, buf.Bytes(), 0o644)
	}
	writeZip("def handle(e):\n    return {'zip': 1}\n")
	config := func(nubes string) string {
		return fmt.Sprintf(`
provider "sless" {
  endpoint       = %q
  token          = %q
  nubes_endpoint = %q
}
resource "sless_function" "z" {
  name      = "tf-zip"
  runtime   = "python3.11"
  code_path = %q
  code_hash = filesha256(%q)
}
`, u.URL, u.Token, nubes, zipPath, zipPath)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: config(refuse.URL), ExpectError: regexp.MustCompile(`refused by nubes_endpoint`)},
			{Config: config(accept.URL), Check: servesBody(u, "tf-zip", `"zip": 1`)},
			{
				PreConfig: func() { writeZip("def handle(e):\n    return {'zip': 2}\n") },
				Config:    config(accept.URL),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.z", plancheck.ResourceActionUpdate),
				}},
				Check: servesBody(u, "tf-zip", `"zip": 2`),
			},
		},
	})
}
