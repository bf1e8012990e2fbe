package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/testenv"
)

// `sless up` with a base missing runs the base-building script of its own tree, never one planted
// in the working directory (it runs as root). The real binary runs from a tree whose script only
// records that it ran and fails, which stops sless up.
func TestUpRunsItsOwnBasesScript(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		testenv.Missing(t, "podman", err)
	}
	tmp := t.TempDir()
	marks := filepath.Join(tmp, "marks")
	tree, work := filepath.Join(tmp, "tree"), filepath.Join(tmp, "work")
	for _, d := range []string{marks, filepath.Join(tree, "bin"), filepath.Join(tree, "hack"), filepath.Join(work, "hack")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(tree, "bin", "sless")
	b, err := os.ReadFile(slessBin)
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(tree, "hack", "build-bases.sh")
	for path, body := range map[string]string{
		bin: string(b),
		own: "#!/bin/bash\necho \"$@\" >> " + filepath.Join(marks, "own") + "\nexit 3\n",
		filepath.Join(work, "hack", "build-bases.sh"): "#!/bin/bash\necho \"$@\" >> " + filepath.Join(marks, "planted") + "\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dataDir, podmanRoot := filepath.Join(tmp, "data"), filepath.Join(testenv.CacheDir(), "podman")
	up := func(extra ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"up", "--quiet", "--data-dir", dataDir, "--podman-root", podmanRoot,
			"--bases-dir", filepath.Join(tmp, "bases"), "--listen", testenv.FreeAddr(t), "--registry-listen", testenv.FreeAddr(t)}, extra...)...)
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("sless up did not end within 3 minutes:\n%s", out)
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "down", "--data-dir", dataDir, "--podman-root", podmanRoot).CombinedOutput(); err != nil {
			t.Errorf("sless down: %v\n%s", err, out)
		}
	})

	// A relative --bases-script is refused before anything starts.
	if code, out := up("--bases-script", "hack/build-bases.sh"); code != 2 || !strings.Contains(out, "absolute path") {
		t.Errorf("a relative --bases-script: exit %d\n%s", code, out)
	}
	code, out := up()
	ran, _ := os.ReadFile(filepath.Join(marks, "own"))
	if code == 0 || !strings.Contains(out, "with "+own+": exit status 3") || !strings.Contains(string(ran), "python3.11") && !strings.Contains(string(ran), "nodejs20") {
		t.Errorf("sless up did not run its own tree's script (it ran with %q): exit %d\n%s", ran, code, out)
	}
	if b, err := os.ReadFile(filepath.Join(marks, "planted")); err == nil {
		t.Errorf("sless up ran the script planted in its working directory (with %q)", b)
	}
}
