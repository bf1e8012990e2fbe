package main_test

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestDepsPush(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "is-number"), 0o755)
	os.WriteFile(filepath.Join(dir, "is-number", "index.js"), []byte("module.exports = n => typeof n === 'number'\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, ".bin"), 0o755)
	os.Symlink("../is-number/index.js", filepath.Join(dir, ".bin", "is-number"))
	res := sless(t, nil, "deps", "push", "--dir", dir, "--to", reg+"/sless/deps:k1", "--prefix", "/app/node_modules")
	if res.code != 0 || !strings.Contains(res.stdout, reg+"/sless/deps@sha256:") {
		t.Fatalf("exit %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	ref, _ := name.ParseReference(reg + "/sless/deps:k1")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	if len(ls) != 1 {
		t.Fatalf("%d layers, want 1", len(ls))
	}
	rc, _ := ls[0].Uncompressed()
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "app/node_modules/.bin/is-number" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "../is-number/index.js") {
			t.Errorf("link %+v", h)
		}
	}
	if !strings.Contains(strings.Join(names, " "), "app/node_modules/is-number/index.js") {
		t.Errorf("entries %v", names)
	}
	// The same directory again: the same digest (deterministic).
	again := sless(t, nil, "deps", "push", "--dir", dir, "--to", reg+"/sless/deps:k2", "--prefix", "/app/node_modules")
	if strings.TrimSpace(strings.Replace(again.stdout, "k2", "k1", 1)) != strings.TrimSpace(res.stdout) {
		t.Errorf("second push %q, first %q", again.stdout, res.stdout)
	}

	escape := t.TempDir()
	os.Symlink("/etc/passwd", filepath.Join(escape, "passwd"))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tag", []string{"deps", "push", "--dir", dir, "--to", reg + "/sless/deps"}, 2, "REPO:TAG"},
		{"missing dir", []string{"deps", "push", "--dir", "/nonexistent", "--to", reg + "/sless/deps:x"}, 1, "not a directory"},
		{"escaping symlink", []string{"deps", "push", "--dir", escape, "--to", reg + "/sless/deps:x"}, 1, "outside the tree"},
		{"no flags", []string{"deps", "push"}, 2, "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sless(t, nil, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %s", r.code, r.stderr)
			}
		})
	}
	if ts := tags(t, reg+"/sless/deps"); len(ts) != 2 {
		t.Errorf("tags %v, want k1 and k2 only", ts)
	}
}
