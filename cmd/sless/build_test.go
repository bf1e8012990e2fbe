package main_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sless-dev/sless/internal/testenv"
)

var (
	slessBin string
	reg      string
	baseRef  string
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "sless-cli-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	slessBin = filepath.Join(tmp, "sless")
	if out, err := exec.Command("go", "build", "-o", slessBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sless: %v\n%s", err, out)
		return 1
	}
	s, err := testenv.StartRegistry(filepath.Join(tmp, "registry"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	reg = s.Addr()
	base, _ := random.Image(1024, 2)
	base = mutate.MediaType(base, types.OCIManifestSchema1)
	baseRef = reg + "/runtimes/test:latest"
	r, _ := name.ParseReference(baseRef)
	if err := remote.Write(r, base); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

type result struct {
	code           int
	stdout, stderr string
}

func sless(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), slessBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, o.String(), e.String()}
}

func writeZip(t *testing.T, files map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "code.zip")
	os.WriteFile(p, testenv.Zip(files), 0o644)
	return p
}

func tags(t *testing.T, repo string) []string {
	r, _ := name.NewRepository(repo)
	ts, err := remote.List(r)
	if err != nil {
		return nil
	}
	return ts
}

func TestBuildDirAndZip(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(e):\n    return e\n"), 0o644)
	res := sless(t, nil, "build", "--runtime-image", baseRef, "--src", dir, "--handler", "handler.handle", "--to", reg+"/fn/cli:v1")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, reg+"/fn/cli@sha256:") {
		t.Fatalf("last line %q, want %s/fn/cli@sha256:…", last, reg)
	}
	for _, want := range []string{"resolve: resolving runtime image", "layer: code layer", "push: pushed"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks progress %q:\n%s", want, res.stderr)
		}
	}
	tag, _ := name.ParseReference(reg + "/fn/cli:v1")
	desc, err := remote.Head(tag)
	if err != nil || !strings.HasSuffix(last, desc.Digest.String()) {
		t.Fatalf("tag v1 points at %v (%v), CLI printed %s", desc, err, last)
	}
	// Same directory again: same digest (deterministic, SOURCE_DATE_EPOCH unset).
	again := sless(t, nil, "build", "--runtime-image", baseRef, "--src", dir, "--to", reg+"/fn/cli", "--quiet")
	if strings.TrimSpace(again.stdout) != last || again.stderr != "" {
		t.Errorf("rebuild printed %q (stderr %q), want %q and a quiet stderr", again.stdout, again.stderr, last)
	}
	// SOURCE_DATE_EPOCH moves the digest.
	epoch := sless(t, []string{"SOURCE_DATE_EPOCH=1700000000"}, "build", "--runtime-image", baseRef, "--src", dir, "--to", reg+"/fn/cli", "--quiet")
	if epoch.code != 0 || strings.TrimSpace(epoch.stdout) == last {
		t.Errorf("SOURCE_DATE_EPOCH build: exit %d, %q", epoch.code, epoch.stdout)
	}

	z := writeZip(t, map[string]string{"index.js": "exports.handle = e => e\n"})
	zres := sless(t, nil, "build", "--runtime-image", baseRef, "--src", z, "--handler", "index.handle", "--to", reg+"/fn/clizip:v1")
	if zres.code != 0 || !strings.Contains(zres.stdout, reg+"/fn/clizip@sha256:") {
		t.Fatalf("zip build: exit %d\n%s\n%s", zres.code, zres.stdout, zres.stderr)
	}
}

func TestBuildBadInput(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "handler.py"), []byte("x"), 0o644)
	linkDir := t.TempDir()
	os.WriteFile(filepath.Join(linkDir, "handler.py"), []byte("x"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(linkDir, "secrets"))
	notZip := filepath.Join(t.TempDir(), "code.zip")
	os.WriteFile(notZip, []byte("definitely not a zip"), 0o644)

	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		want []string
	}{
		{"no flags", []string{"build"}, nil, 2, []string{"--runtime-image is required"}},
		{"no src", []string{"build", "--runtime-image", baseRef, "--to", reg + "/fn/bad"}, nil, 2, []string{"--src is required"}},
		{"no target", []string{"build", "--runtime-image", baseRef, "--src", dir}, nil, 2, []string{"--to is required"}},
		{"stray argument", []string{"build", "--runtime-image", baseRef, "--src", dir, "--to", reg + "/fn/bad", "extra"}, nil, 2, []string{"unexpected argument"}},
		{"missing src", []string{"build", "--runtime-image", baseRef, "--src", "/nonexistent/dir", "--to", reg + "/fn/bad"}, nil, 1, []string{"no such file"}},
		{"zip slip", []string{"build", "--runtime-image", baseRef, "--src", writeZip(t, map[string]string{"../../evil.py": "x"}), "--to", reg + "/fn/bad"}, nil, 1, []string{"unsafe path", "would escape", "fix:"}},
		{"symlink", []string{"build", "--runtime-image", baseRef, "--src", linkDir, "--to", reg + "/fn/bad"}, nil, 1, []string{"symlink", "fix:"}},
		{"not a zip", []string{"build", "--runtime-image", baseRef, "--src", notZip, "--to", reg + "/fn/bad"}, nil, 1, []string{"not a readable zip", "fix:"}},
		{"bad handler", []string{"build", "--runtime-image", baseRef, "--src", dir, "--handler", "handler", "--to", reg + "/fn/bad"}, nil, 1, []string{"module.function"}},
		{"digest target", []string{"build", "--runtime-image", baseRef, "--src", dir, "--to", reg + "/fn/bad@sha256:" + strings.Repeat("0", 64)}, nil, 1, []string{"not a digest"}},
		{"too large", []string{"build", "--runtime-image", baseRef, "--src", dir, "--max-bytes", "0", "--to", reg + "/fn/bad"}, nil, 1, []string{"limits must be positive"}},
		{"bad epoch", []string{"build", "--runtime-image", baseRef, "--src", dir, "--to", reg + "/fn/bad"}, []string{"SOURCE_DATE_EPOCH=yesterday"}, 2, []string{"SOURCE_DATE_EPOCH"}},
		{"missing runtime", []string{"build", "--runtime-image", reg + "/runtimes/nope:latest", "--src", dir, "--to", reg + "/fn/bad"}, nil, 1, []string{"resolving runtime image"}},
		{"unknown command", []string{"frobnicate"}, nil, 2, []string{"unknown command"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := sless(t, tc.env, tc.args...)
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", res.code, tc.code, res.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, res.stderr)
				}
			}
			if strings.Contains(res.stdout, "@sha256:") {
				t.Errorf("printed a reference on failure: %s", res.stdout)
			}
		})
	}
	if ts := tags(t, reg+"/fn/bad"); len(ts) != 0 {
		t.Errorf("failed builds left tags %v in fn/bad", ts)
	}
}

// `sless build --runtime provided` refuses code without an executable bootstrap at its root, as
// the API refuses the upload, and keeps the executable bit of one that has it (setuid dropped).
func TestBuildProvided(t *testing.T) {
	mk := func(files map[string]os.FileMode) string {
		dir := t.TempDir()
		for n, mode := range files {
			p := filepath.Join(dir, n)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if mode.IsDir() {
				os.MkdirAll(p, 0o755)
				continue
			}
			os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644)
			os.Chmod(p, mode)
		}
		return dir
	}
	linked := mk(map[string]os.FileMode{"real": 0o755})
	os.Symlink("/bin/sh", filepath.Join(linked, "bootstrap"))
	var z bytes.Buffer
	zw := zip.NewWriter(&z)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate}
	h.SetMode(0o644)
	w, _ := zw.CreateHeader(h)
	w.Write([]byte("#!/bin/sh\n"))
	zw.Close()
	plainZip := filepath.Join(t.TempDir(), "code.zip")
	os.WriteFile(plainZip, z.Bytes(), 0o644)

	build := func(src string, extra ...string) result {
		return sless(t, nil, append([]string{"build", "--runtime-image", baseRef, "--runtime", "provided", "--src", src, "--to", reg + "/fn/provided-bad"}, extra...)...)
	}
	for name, src := range map[string]string{
		"no bootstrap":       mk(map[string]os.FileMode{"main": 0o755}),
		"not executable":     mk(map[string]os.FileMode{"bootstrap": 0o644}),
		"a directory":        mk(map[string]os.FileMode{"bootstrap": os.ModeDir | 0o755}),
		"in a subdirectory":  mk(map[string]os.FileMode{"bin/bootstrap": 0o755}),
		"a symlink":          linked,
		"zip without x bits": plainZip,
	} {
		t.Run(name, func(t *testing.T) {
			res := build(src)
			if res.code != 1 || !strings.Contains(res.stderr, "bootstrap") || !strings.Contains(res.stderr, "fix:") {
				t.Fatalf("exit %d, want 1 naming bootstrap with a fix:\n%s", res.code, res.stderr)
			}
		})
	}
	if res := sless(t, nil, "build", "--runtime-image", baseRef, "--runtime", "cobol", "--src", linked, "--to", reg+"/fn/provided-bad"); res.code != 2 || !strings.Contains(res.stderr, "provided") {
		t.Errorf("unknown runtime: exit %d\n%s", res.code, res.stderr)
	}
	if ts := tags(t, reg+"/fn/provided-bad"); len(ts) != 0 {
		t.Errorf("failed builds left tags %v", ts)
	}
	// Without --runtime the rule does not apply (the CLI cannot know the runtime).
	if res := sless(t, nil, "build", "--runtime-image", baseRef, "--src", mk(map[string]os.FileMode{"main": 0o755}), "--to", reg+"/fn/provided-any", "--quiet"); res.code != 0 {
		t.Errorf("build without --runtime: exit %d\n%s", res.code, res.stderr)
	}

	good := mk(map[string]os.FileMode{"bootstrap": os.ModeSetuid | 0o755})
	res := sless(t, nil, "build", "--runtime-image", baseRef, "--runtime", "provided", "--src", good, "--to", reg+"/fn/provided:v1", "--quiet")
	if res.code != 0 {
		t.Fatalf("good build: exit %d\n%s", res.code, res.stderr)
	}
	ref, _ := name.ParseReference(strings.TrimSpace(res.stdout))
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	rc, err := ls[len(ls)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		hd, err := tr.Next()
		if err != nil {
			break
		}
		if hd.Name == "app/function/bootstrap" {
			found = true
			if hd.Mode != 0o755 {
				t.Errorf("bootstrap has mode %o in the image, want 755", hd.Mode)
			}
		}
	}
	if !found {
		t.Error("no app/function/bootstrap in the code layer")
	}
}
