package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	providerOnce sync.Once
	providerDir  string
	providerErr  error
)

// ProviderDir builds cmd/terraform-provider-sless once per test process into a directory that a
// dev_overrides CLI configuration can point at.
func ProviderDir(t testing.TB) string {
	t.Helper()
	providerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sless-provider-")
		if err != nil {
			providerErr = err
			return
		}
		providerDir = dir
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "terraform-provider-sless"), "./cmd/terraform-provider-sless")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			providerErr = fmt.Errorf("building the provider: %v\n%s", err, out)
		}
	})
	if providerErr != nil {
		t.Fatal(providerErr)
	}
	return providerDir
}

// TerraformEnv is the environment a real `terraform` needs to use the locally built provider at
// the seed's source address (dev_overrides, so no `terraform init`) and to stay off the network.
func TerraformEnv(t testing.TB, endpoint, token string) []string {
	t.Helper()
	rc := filepath.Join(t.TempDir(), "terraformrc")
	conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    %q = %q\n  }\n  direct {}\n}\n", "terra.k8c.ru/naeel/sless", ProviderDir(t))
	if err := os.WriteFile(rc, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1",
		"SLESS_ENDPOINT="+endpoint, "SLESS_API_TOKEN="+token)
}

// ModuleRoot is the repository root.
func ModuleRoot() string { return moduleRoot() }
