package main

import (
	"slices"
	"strings"
	"testing"
)

// --block-runtime (the shared options.API group) reaches the API's policy; a name the catalog does
// not have refuses the command line, naming the flag.
func TestOperatorBlockRuntime(t *testing.T) {
	base := []string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1"}
	c, err := parseFlags(append(base, "--block-runtime", "nodejs20", "--block-runtime", "nodejs22"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.api.RuntimePolicy().Blocked; !slices.Equal(got, []string{"nodejs20", "nodejs22"}) {
		t.Errorf("blocked %v", got)
	}
	if c, err = parseFlags(base); err != nil || len(c.api.RuntimePolicy().Blocked) != 0 {
		t.Errorf("by default nothing is blocked: %v", err)
	}
	if _, err := parseFlags(append(base, "--block-runtime", "ruby3")); err == nil || !strings.Contains(err.Error(), "--block-runtime") || !strings.Contains(err.Error(), `"ruby3"`) {
		t.Errorf("--block-runtime ruby3: %v", err)
	}
}

// The install passes --block-runtime=$(BLOCK_RUNTIMES) to the API (manager.yaml), an empty value
// by default: that parses, in the API's role as in the others, and blocks nothing; a
// comma-separated value blocks each.
func TestOperatorBlockRuntimeFromConfigMap(t *testing.T) {
	base := []string{"--registry", "r:5000", "--runtime", "python3.11=r/rt@sha256:1"}
	for _, role := range []string{roleAPI, roleAll} {
		c, err := parseFlags(append(base, "--role="+role, "--block-runtime="))
		if err != nil {
			t.Fatalf("--role=%s --block-runtime=: %v", role, err)
		}
		if got := c.api.RuntimePolicy().Blocked; len(got) != 0 {
			t.Errorf("--role=%s --block-runtime= blocks %q", role, got)
		}
	}
	c, err := parseFlags(append(base, "--role=api", "--block-runtime=nodejs20,python3.11"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.api.RuntimePolicy().Blocked; !slices.Equal(got, []string{"nodejs20", "python3.11"}) {
		t.Errorf("--block-runtime=nodejs20,python3.11 blocks %q", got)
	}
}
