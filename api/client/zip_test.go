package client_test

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/client"
)

// The same files give the same archive whatever their times; .git and .terraform stay out; only
// the execute bit of a mode survives; links, special files and an empty directory are refused.
func TestZipDir(t *testing.T) {
	write := func(dir, rel, body string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		write(d, "handler.py", "def handle(e): return 1\n", 0o600)
		write(d, "bin/run.sh", "#!/bin/sh\n", 0o700)
		write(d, ".git/config", "[core]\n", 0o644)
		write(d, "sub/.terraform/x", "state", 0o644)
	}
	os.Chtimes(filepath.Join(b, "handler.py"), time.Unix(1e9, 0), time.Unix(1e9, 0))
	za, sa, err := client.ZipDir(a)
	if err != nil {
		t.Fatal(err)
	}
	zb, sb, _ := client.ZipDir(b)
	if sa != sb || !bytes.Equal(za, zb) {
		t.Errorf("the same files, different archives: %s %s", sa, sb)
	}
	zr, err := zip.NewReader(bytes.NewReader(za), int64(len(za)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name+" "+f.Mode().String())
	}
	if got := strings.Join(names, ", "); got != "bin/run.sh -rwxr-xr-x, handler.py -rw-r--r--" {
		t.Errorf("entries %s", got)
	}

	os.Symlink("/etc/passwd", filepath.Join(a, "link"))
	if _, _, err := client.ZipDir(a); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a symlink: %v", err)
	}
	if _, _, err := client.ZipDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no files") {
		t.Errorf("an empty directory: %v", err)
	}
}
