package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Where the endpoint and token come from: each environment variable over the config file, the
// file alone, a relative XDG_CONFIG_HOME ignored, and clear errors for what is missing or broken.
func TestSettings(t *testing.T) {
	home, xdg := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", xdg)
	t.Setenv(envEndpoint, "")
	t.Setenv(envToken, "")
	var warn bytes.Buffer

	if _, _, err := settings(&warn); err == nil || !strings.Contains(err.Error(), "not logged in") {
		t.Errorf("nothing set: %v", err)
	}
	p, err := saveConfig(cliConfig{Endpoint: "http://file:1", Token: "file-token"})
	if err != nil || p != filepath.Join(xdg, "sless", "config.yaml") {
		t.Fatalf("saved to %s: %v", p, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %o", st.Mode().Perm())
	}
	for _, tc := range []struct {
		endpoint, token         string
		wantEndpoint, wantToken string
	}{
		{"", "", "http://file:1", "file-token"},
		{"http://env:2", "", "http://env:2", "file-token"},
		{"", "env-token", "http://file:1", "env-token"},
		{"http://env:2", "env-token", "http://env:2", "env-token"},
	} {
		t.Setenv(envEndpoint, tc.endpoint)
		t.Setenv(envToken, tc.token)
		e, tok, err := settings(&warn)
		if err != nil || e != tc.wantEndpoint || tok != tc.wantToken {
			t.Errorf("env %q %q: %q %q %v", tc.endpoint, tc.token, e, tok, err)
		}
	}
	if warn.Len() != 0 {
		t.Errorf("warned: %s", warn.String())
	}

	// Others can read the file: a warning, still used.
	t.Setenv(envEndpoint, "")
	t.Setenv(envToken, "")
	os.Chmod(p, 0o644)
	if e, _, err := settings(&warn); err != nil || e != "http://file:1" || !strings.Contains(warn.String(), "chmod 600") {
		t.Errorf("0644: %q %v, warning %q", e, err, warn.String())
	}
	// A broken file names itself; with both variables set it is not read at all.
	os.WriteFile(p, []byte("endpoint: [\n"), 0o600)
	if _, _, err := settings(&warn); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("broken file: %v", err)
	}
	os.WriteFile(p, []byte("endpoint: http://x\ntokn: typo\n"), 0o600)
	if _, _, err := settings(&warn); err == nil || !strings.Contains(err.Error(), "tokn") {
		t.Errorf("unknown field: %v", err)
	}
	t.Setenv(envEndpoint, "http://env:2")
	t.Setenv(envToken, "env-token")
	if _, _, err := settings(&warn); err != nil {
		t.Errorf("both variables over a broken file: %v", err)
	}

	// A relative XDG_CONFIG_HOME is ignored (XDG base directory spec): ~/.config.
	t.Setenv("XDG_CONFIG_HOME", "relative/dir")
	if p, err := configPath(); err != nil || p != filepath.Join(home, ".config", "sless", "config.yaml") {
		t.Errorf("relative XDG_CONFIG_HOME: %s %v", p, err)
	}
}

// run maps command-line mistakes to usageError (exit 2) and leaves the commands' own errors alone.
func TestRunExitKinds(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(envEndpoint, "")
	t.Setenv(envToken, "")
	var out, errb bytes.Buffer
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{[]string{}, true},
		{[]string{"nope"}, true},
		{[]string{"fn", "get"}, true},
		{[]string{"fn", "ls", "--bogus"}, true},
		{[]string{"fn", "ls", "-o", "xml"}, true},
		{[]string{"build"}, true}, // the build command's own flag checks
		{[]string{"fn", "ls"}, false},
	} {
		err := run(t.Context(), tc.args, &out, &errb)
		_, isUsage := err.(usageError)
		if err == nil || isUsage != tc.usage {
			t.Errorf("%v: %v (usage error %v, want %v)", tc.args, err, isUsage, tc.usage)
		}
	}
	out.Reset()
	if err := run(t.Context(), []string{"version"}, &out, &errb); err != nil || out.String() != "sless "+version+"\n" {
		t.Errorf("version: %q %v", out.String(), err)
	}
}
