package main_test

import (
	"slices"
	"testing"
)

// The acceptance check: every flag both servers accept shows the same type, help text and
// default in `sless-operator --help` and `sless up --help` (the groups of cmd/internal/options
// declare them once).
func TestSharedFlagsHaveOneHelpText(t *testing.T) {
	operator, sless := binaries(t)
	op, up := helpFlags(t, operator), helpFlags(t, sless, "up")
	var shared []string
	for name, text := range op {
		if name == "help" {
			continue
		}
		if upText, ok := up[name]; ok {
			shared = append(shared, name)
			if upText != text {
				t.Errorf("--%s differs:\n  sless-operator: %s\n  sless up:       %s", name, text, upText)
			}
		}
	}
	slices.Sort(shared)
	// What both servers had before the options groups (the 18), and --upload-limit, which
	// was sless up's only.
	for _, name := range []string{"listen", "public-url", "fn-domain", "upload-limit", "upload-rate", "upload-burst", "max-held",
		"jwks-url", "jwt-public-key", "jwt-issuer", "jwt-audience", "allow-any-audience", "autoscale-stable-window", "autoscale-panic-window",
		"pip-index-url", "npm-registry", "index-host", "tenant-quota-functions", "tenant-quota-memory", "block-runtime"} {
		if !slices.Contains(shared, name) {
			t.Errorf("--%s is not a flag of both servers (shared: %v)", name, shared)
		}
	}
	t.Logf("%d shared flags: %v", len(shared), shared)
}
