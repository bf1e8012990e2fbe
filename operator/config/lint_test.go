package config_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/internal/testenv"
)

// The install passes the manifest linter users run on what they apply: kube-score reports no
// CRITICAL on what `kubectl apply -k operator/config/default` applies (kustomize only gathers files
// there, so the files its kustomizations list are the rendering; the CRDs are not kube-score's
// business).
func TestKubeScore(t *testing.T) {
	bin, err := testenv.Tool("kube-score")
	if err != nil {
		testenv.Missing(t, "kube-score (hack/install-go-tools.sh kube-score)", err)
	}
	files := kustomized(t, "default")
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

// kustomized lists the manifest files dir's kustomization gathers, following directories.
func kustomized(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
		Patches   []any    `json:"patches"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Patches) > 0 {
		t.Fatalf("%s/kustomization.yaml patches: render it with kustomize instead", dir)
	}
	var files []string
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			if !strings.HasSuffix(p, "crd") {
				files = append(files, kustomized(t, p)...)
			}
			continue
		}
		files = append(files, p)
	}
	return files
}
