package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --bases-script is never looked up in the working directory: its default is the binary's own
// tree's script (absolute), and a relative or missing path is refused before anything starts.
func TestBasesScriptFlag(t *testing.T) {
	work := t.TempDir()
	planted := filepath.Join(work, "hack", "build-bases.sh")
	os.MkdirAll(filepath.Dir(planted), 0o755)
	if err := os.WriteFile(planted, []byte("#!/bin/sh\ntouch planted\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)

	c, err := parseUp(nil)
	if err != nil {
		t.Fatal(err)
	}
	if script := c.basesScript; script != "" && (!filepath.IsAbs(script) || strings.HasPrefix(script, work+string(filepath.Separator))) {
		t.Errorf("the default --bases-script %q is the working directory's", script)
	}
	for _, tc := range []struct{ flag, want string }{
		{"hack/build-bases.sh", "absolute path"},
		{"./hack/build-bases.sh", "absolute path"},
		{filepath.Join(work, "hack", "missing.sh"), "no such file"},
		{work, "no such file"}, // a directory
	} {
		if _, err := parseUp([]string{"--bases-script", tc.flag}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--bases-script %s: %v, want an error saying %q", tc.flag, err, tc.want)
		}
	}
	if c, err := parseUp([]string{"--bases-script", ""}); err != nil || c.basesScript != "" {
		t.Errorf("--bases-script '' (never build): %+v %v", c, err)
	}
	if c, err := parseUp([]string{"--bases-script", planted}); err != nil || c.basesScript != planted {
		t.Errorf("an absolute --bases-script: %v", err)
	}
}
