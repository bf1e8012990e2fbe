package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// benchTerraform measures `terraform apply` of a one-line change to examples/hello-python until
// the new code answers on /fn/, and a `terraform plan` with no change (Terraform's own fixed cost:
// process, provider plugin, refresh, plan).
func benchTerraform(ctx context.Context, c config, work, slessBin string) error {
	cl, stop, err := startSlessUp(ctx, work, slessBin, "tf-data")
	if err != nil {
		return err
	}
	defer stop()
	tfr, err := newTerraform(ctx, work, "tf-hello", cl.Endpoint(), tokenOf(work, "tf-data"))
	if err != nil {
		return err
	}
	dir := tfr.dir
	terraform := func(args ...string) (time.Duration, error) { return tfr.run(ctx, args...) }
	if _, err := terraform("apply", "-auto-approve", "-input=false"); err != nil {
		return err
	}
	handler := filepath.Join(dir, "code", "handler.py")
	orig, _ := os.ReadFile(handler)
	url := cl.FunctionURL("hello-python")
	applies, plans := &series{}, &series{}
	n := 5
	logf("terraform: %d applies of a one-line change, %d no-change plans", n, n)
	for i := 0; i < n; i++ {
		marker := fmt.Sprintf("tf-bench-%d", i)
		os.WriteFile(handler, []byte(strings.Replace(string(orig), "hello, ", marker+", ", 1)), 0o644)
		start := time.Now()
		if _, err := terraform("apply", "-auto-approve", "-input=false"); err != nil {
			return err
		}
		for {
			resp, err := http.Get(url)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), marker) {
				break
			}
			if time.Since(start) > time.Minute {
				return fmt.Errorf("the new code never answered: %s", b)
			}
		}
		applies.ds = append(applies.ds, time.Since(start))
		d, err := terraform("plan", "-detailed-exitcode", "-input=false")
		if err != nil {
			return fmt.Errorf("the plan after apply is not empty: %w", err)
		}
		plans.ds = append(plans.ds, d)
	}
	terraform("destroy", "-auto-approve", "-input=false")
	fmt.Printf("\n### terraform apply of a one-line change (examples/hello-python, Terraform %s, sless up)\n\n", "v1.5.7")
	fmt.Println("| step | median ms (min–max, n) |")
	fmt.Println("|---|---|")
	fmt.Printf("| `terraform apply` → the new code answers on /fn/ | %s |\n", applies.summary())
	fmt.Printf("| `terraform plan` with no change (Terraform's fixed cost: CLI, provider plugin, refresh) | %s |\n", plans.summary())
	v := "met"
	if applies.median() > 3*time.Second {
		v = "**missed**"
	}
	fmt.Printf("\n| target | measured | verdict |\n|---|---|---|\n| apply of a one-line change ≤ 3 s in total | %s ms | %s |\n", ms(applies.median()), v)
	fmt.Println("\nThe platform's share is the `sless up` table's upload → new response figure, measured in the same run.")
	return nil
}

// tfRunner runs the real Terraform CLI on a copy of examples/hello-python with the provider built
// from this tree (dev_overrides: no init).
type tfRunner struct {
	tf, dir string
	env     []string
}

func newTerraform(ctx context.Context, work, name, endpoint, token string) (*tfRunner, error) {
	root, _ := repoRoot()
	tf, err := findTool("terraform")
	if err != nil {
		return nil, err
	}
	provDir := filepath.Join(work, "provider")
	if _, err := os.Stat(filepath.Join(provDir, "terraform-provider-sless")); err != nil {
		build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(provDir, "terraform-provider-sless"), "./cmd/terraform-provider-sless")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the provider: %v\n%s", err, out)
		}
	}
	rc := filepath.Join(work, "terraformrc")
	os.WriteFile(rc, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides { %q = %q }\n  direct {}\n}\n", "terra.k8c.ru/naeel/sless", provDir)), 0o644)
	dir := filepath.Join(work, name)
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "examples", "hello-python"), dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v %s", err, out)
	}
	return &tfRunner{tf: tf, dir: dir, env: append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1",
		"SLESS_ENDPOINT="+endpoint, "SLESS_API_TOKEN="+token)}, nil
}

func (r *tfRunner) run(ctx context.Context, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, r.tf, args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("terraform %s: %v\n%s", args[0], err, out)
	}
	return time.Since(start), nil
}

func tokenOf(work, dataName string) string {
	b, _ := os.ReadFile(filepath.Join(work, dataName, "dev-token"))
	return strings.TrimSpace(string(b))
}

// findTool looks on PATH, then in the cache where hack/ builds tools.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob(filepath.Join(cacheDir(), "bin", name+"-*"))
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("%s not found (hack/install-go-tools.sh %s)", name, name)
}
