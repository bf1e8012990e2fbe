package config_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sless-dev/sless/internal/testenv"
)

// The install passes the manifest linter users run on what they apply: kube-score reports no
// CRITICAL on operator/config (the CRDs are not its business; kustomize only gathers these files).
func TestKubeScore(t *testing.T) {
	bin, err := testenv.Tool("kube-score")
	if err != nil {
		testenv.Missing(t, "kube-score (hack/install-go-tools.sh kube-score)", err)
	}
	var files []string
	for _, dir := range []string{"manager", "rbac"} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range m {
			if filepath.Base(f) != "kustomization.yaml" {
				files = append(files, f)
			}
		}
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	out, _ := exec.Command(bin, append([]string{"score", "--output-format", "ci"}, files...)...).CombinedOutput()
	if !strings.Contains(string(out), "[OK]") {
		t.Fatalf("kube-score said nothing useful:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "[CRITICAL]") {
			t.Error(line)
		}
	}
}
