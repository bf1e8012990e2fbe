package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sless-dev/sless/internal/testenv"
)

// The registry is good enough for the real npm: `npm ci` installs from the lockfile it writes.
func TestNPMRegistryServesNpmCI(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "npm", err)
	}
	r, err := testenv.StartNPMRegistry("127.0.0.1", testenv.NPMPackage{Name: "leftpad-sless", Version: "1.2.3",
		Files: map[string]string{"index.js": "module.exports = (s, n) => String(s).padStart(n, '0');\n"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := t.TempDir()
	pj, lock := r.Manifests("fn", "leftpad-sless")
	os.WriteFile(filepath.Join(dir, "package.json"), []byte(pj), 0o644)
	os.WriteFile(filepath.Join(dir, "package-lock.json"), []byte(lock), 0o644)
	cmd := exec.Command(npm, "ci", "--omit=dev", "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_registry="+r.URL, "npm_config_cache="+filepath.Join(dir, ".npm"), "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "leftpad-sless", "index.js"))
	if err != nil || len(b) == 0 || r.Tarballs.Load() != 1 {
		t.Errorf("installed %q %v, %d tarball downloads", b, err, r.Tarballs.Load())
	}
}
