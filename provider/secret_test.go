package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// tfRun is a real terraform CLI in one directory, with the provider built from this tree.
type tfRun struct {
	t   *testing.T
	bin string
	dir string
	env []string
}

// run runs terraform and returns its combined output and exit status.
func (r *tfRun) run(args ...string) (string, int) {
	r.t.Helper()
	// Options go before the positional arguments: after the subcommand ("state rm" is two words).
	n := 1
	if args[0] == "state" {
		n = 2
	}
	argv := append(append(append([]string{}, args[:n]...), "-no-color"), args[n:]...)
	cmd := exec.Command(r.bin, argv...)
	cmd.Dir, cmd.Env = r.dir, r.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	return out.String(), 0
}

// ok runs terraform and fails the test unless it exits with want.
func (r *tfRun) ok(want int, args ...string) string {
	r.t.Helper()
	out, code := r.run(args...)
	if code != want {
		r.t.Fatalf("terraform %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

// state is terraform.tfstate's resources: attributes and the paths Terraform keeps sensitive.
func (r *tfRun) state() map[string]stateResource {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.dir, "terraform.tfstate"))
	if err != nil {
		r.t.Fatal(err)
	}
	var st struct {
		Resources []struct {
			Type, Name string
			Instances  []stateResource
		}
	}
	if err := json.Unmarshal(b, &st); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]stateResource{}
	for _, res := range st.Resources {
		if len(res.Instances) == 1 {
			out[res.Type+"."+res.Name] = res.Instances[0]
		}
	}
	return out
}

type stateResource struct {
	Attributes          map[string]any    `json:"attributes"`
	SensitiveAttributes []json.RawMessage `json:"sensitive_attributes"`
}

// sensitive reports whether the state marks attr (or an element of it) sensitive.
func (s stateResource) sensitive(attr string) bool {
	for _, p := range s.SensitiveAttributes {
		var b bytes.Buffer
		json.Compact(&b, p)
		if strings.Contains(b.String(), fmt.Sprintf(`"value":%q`, attr)) {
			return true
		}
	}
	return false
}

// TestAccSecrets drives sless_secret and a function that uses it through the terraform CLI a user
// runs, against a real `sless up`: the values reach the function, and no plan or apply output
// shows them; a new value is an in-place update (version 2) that the function serves without a
// rebuild; a write by someone else plans a rewrite; import by name leaves data for the next
// apply; a secret a function still uses cannot be destroyed (the API's 409, said plainly).
func TestAccSecrets(t *testing.T) {
	tf, err := testenv.Tool("terraform")
	if err != nil {
		testenv.Missing(t, "the terraform CLI (hack/install-go-tools.sh terraform)", err)
	}
	u := testenv.StartSlessUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	r := &tfRun{t: t, bin: tf, dir: t.TempDir(), env: testenv.TerraformEnv(t, u.URL, u.Token)}
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, `import os
def handle(event):
    with open('/var/run/secrets/db/user') as f:
        user = f.read()
    return {'url': os.environ.get('DB_URL'), 'user': user, 'mode': os.environ.get('MODE'), 'extra': os.environ.get('EXTRA')}
`)
	const (
		url1, url2, user = "postgres://s3cr3t-one@db", "postgres://s3cr3t-two@db", "app-user-s3cr3t"
		envMarker        = "env-marker-s3cr3t"
	)
	config := func(url string, extra bool) {
		secretEnv := `DB_URL = "${sless_secret.db.name}/url"`
		if extra {
			secretEnv += "\n    EXTRA = \"${sless_secret.db.name}/user\""
		}
		hcl := fmt.Sprintf(`
terraform {
  required_providers {
    sless = { source = "terra.k8c.ru/naeel/sless" }
  }
}
provider "sless" {}

resource "sless_secret" "db" {
  name = "db"
  data = {
    url  = %q
    user = %q
  }
}

resource "sless_function" "f" {
  name       = "tf-secrets"
  runtime    = "python3.11"
  source_dir = %q
  env_vars   = { MODE = %q }
  secret_env = {
    %s
  }
  secret_files = { "/var/run/secrets/db" = sless_secret.db.name }
}
`, url, user, src, envMarker, secretEnv)
		if err := os.WriteFile(filepath.Join(r.dir, "main.tf"), []byte(hcl), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// noValues fails the test if terraform's output shows a value.
	noValues := func(what, out string) {
		t.Helper()
		for _, v := range []string{url1, url2, user, envMarker, "s3cr3t"} {
			if strings.Contains(out, v) {
				t.Errorf("%s shows the value %q:\n%s", what, v, out)
			}
		}
	}
	// serves waits until the function answers want: a secret's new value restarts the function
	// after the apply has returned.
	serves := func(want map[string]any) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := u.Get("/fn/" + u.Client.Namespace() + "/tf-secrets")
			var got map[string]any
			json.Unmarshal([]byte(body), &got)
			same := code == 200
			for k, v := range want {
				same = same && got[k] == v
			}
			if same {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/fn/ answered %d %s, want %v", code, body, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	version := func() int64 {
		t.Helper()
		s, err := u.Client.GetSecret(ctx, "db")
		if err != nil {
			t.Fatal(err)
		}
		return s.Version
	}

	config(url1, false)
	plan := r.ok(0, "plan", "-input=false")
	noValues("the first plan", plan)
	if strings.Count(plan, "(sensitive value)") < 2 { // data and env_vars
		t.Errorf("the plan shows no (sensitive value):\n%s", plan)
	}
	out := r.ok(0, "apply", "-auto-approve", "-input=false")
	noValues("the first apply", out)
	serves(map[string]any{"url": url1, "user": user, "mode": envMarker})
	st := r.state()
	if s := st["sless_secret.db"]; !s.sensitive("data") || s.Attributes["version"] != float64(1) ||
		!slices.Equal(toStrings(s.Attributes["keys"]), []string{"url", "user"}) {
		t.Errorf("the secret's state: %+v", s)
	}
	if f := st["sless_function.f"]; !f.sensitive("env_vars") || f.sensitive("secret_env") {
		t.Errorf("the function's sensitive attributes: %s", f.SensitiveAttributes)
	}
	image := st["sless_function.f"].Attributes["image"]
	if out := r.ok(0, "plan", "-detailed-exitcode", "-input=false"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after apply:\n%s", out)
	}

	// A new value, and one more secret_env variable: both in place, no rebuild.
	config(url2, true)
	plan = r.ok(2, "plan", "-detailed-exitcode", "-input=false")
	noValues("the rotation's plan", plan)
	for _, w := range []string{"sless_secret.db will be updated in-place", "sless_function.f will be updated in-place", "~ data", "(sensitive value)", `+ "EXTRA"`, `"db/user"`} {
		if !strings.Contains(plan, w) {
			t.Errorf("the rotation's plan lacks %q:\n%s", w, plan)
		}
	}
	if strings.Contains(plan, "must be replaced") {
		t.Errorf("the rotation replaces something:\n%s", plan)
	}
	noValues("the rotation's apply", r.ok(0, "apply", "-auto-approve", "-input=false"))
	if v := version(); v != 2 {
		t.Errorf("version %d after the rotation, want 2", v)
	}
	serves(map[string]any{"url": url2, "extra": user})
	if st := r.state(); st["sless_function.f"].Attributes["image"] != image || st["sless_secret.db"].Attributes["version"] != float64(2) {
		t.Errorf("after the rotation: image %v (was %v), version %v", st["sless_function.f"].Attributes["image"], image, st["sless_secret.db"].Attributes["version"])
	}

	// Someone else writes the secret: the next plan puts the configured values back.
	if _, err := u.Client.PutSecret(ctx, "db", map[string]string{"url": "postgres://other@db", "user": "other"}); err != nil {
		t.Fatal(err)
	}
	plan = r.ok(2, "plan", "-detailed-exitcode", "-input=false")
	if !strings.Contains(plan, "sless_secret.db will be updated in-place") {
		t.Errorf("a write out of band plans no update:\n%s", plan)
	}
	noValues("the repair's apply", r.ok(0, "apply", "-auto-approve", "-input=false"))
	if v := version(); v != 4 {
		t.Errorf("version %d after the repair, want 4", v)
	}
	serves(map[string]any{"url": url2})

	// Import by name: keys and version, no values; the next apply writes them.
	r.ok(0, "state", "rm", "sless_secret.db")
	noValues("import", r.ok(0, "import", "-input=false", "sless_secret.db", "db"))
	if s := r.state()["sless_secret.db"]; s.Attributes["data"] != nil || s.Attributes["version"] != float64(4) || s.Attributes["id"] != "db" ||
		!slices.Equal(toStrings(s.Attributes["keys"]), []string{"url", "user"}) {
		t.Errorf("imported: %+v", s.Attributes)
	}
	plan = r.ok(2, "plan", "-detailed-exitcode", "-input=false")
	if !strings.Contains(plan, "sless_secret.db will be updated in-place") || strings.Contains(plan, "sless_function.f will be") {
		t.Errorf("the plan after import:\n%s", plan)
	}
	noValues("the apply after import", r.ok(0, "apply", "-auto-approve", "-input=false"))
	if v := version(); v != 5 {
		t.Errorf("version %d after the apply that follows the import, want 5", v)
	}
	r.ok(0, "plan", "-detailed-exitcode", "-input=false")

	// A function outside this configuration still uses the secret: destroy says so.
	if _, err := u.Client.CreateFunction(ctx, apiv1.Function{Name: "other", Runtime: "python3.11", SecretEnv: map[string]string{"X": "db/url"}}); err != nil {
		t.Fatal(err)
	}
	out = r.ok(1, "destroy", "-auto-approve", "-input=false")
	for _, w := range []string{"The secret is still in use", `secret "db" is used by function(s) other`} {
		if !strings.Contains(out, w) {
			t.Errorf("destroy of a secret in use lacks %q:\n%s", w, out)
		}
	}
	if _, err := u.Client.GetSecret(ctx, "db"); err != nil {
		t.Errorf("the secret in use is gone: %v", err)
	}
	if err := u.Client.DeleteFunction(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	r.ok(0, "destroy", "-auto-approve", "-input=false")
	if ss, err := u.Client.ListSecrets(ctx); err != nil || len(ss) != 0 {
		t.Errorf("secrets after destroy: %v %v", ss, err)
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := []string{}
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}
