package main_test

import (
	"strings"
	"testing"
)

// A JWKS URL without an audience would accept every token the identity provider issues: sless up
// refuses to start (before anything else happens) unless told --allow-any-audience.
func TestUpRefusesJWKSWithoutAudience(t *testing.T) {
	dir := t.TempDir()
	res := sless(t, nil, "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--jwks-url", "http://127.0.0.1:1/jwks")
	if res.code == 0 || !strings.Contains(res.stderr, "needs an audience") {
		t.Errorf("exit %d, stderr %q", res.code, res.stderr)
	}
}
