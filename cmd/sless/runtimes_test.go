package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

// --block-runtime (the shared options.API group): repeatable or comma-separated, passed on as the
// install's runtime policy; a name the catalog does not have is a usage error naming the flag.
func TestUpBlockRuntime(t *testing.T) {
	c, err := parseUp([]string{"--block-runtime", "nodejs20", "--block-runtime", "python3.11,provided"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.api.RuntimePolicy()
	if want := []string{"nodejs20", "python3.11", "provided"}; !slices.Equal(p.Blocked, want) {
		t.Errorf("blocked %v, want %v", p.Blocked, want)
	}
	if r, _ := p.Lookup("nodejs20"); r.Status != apiv1.RuntimeBlocked || r.Replacement != "nodejs22" {
		t.Errorf("nodejs20 under the flags: %+v", r)
	}
	if c, err = parseUp(nil); err != nil || len(c.api.RuntimePolicy().Blocked) != 0 {
		t.Errorf("by default nothing is blocked: %+v %v", c.api.RuntimePolicy(), err)
	}
	_, err = parseUp([]string{"--block-runtime", "nodejs18"})
	if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), "--block-runtime") || !strings.Contains(err.Error(), `"nodejs18"`) {
		t.Errorf("--block-runtime nodejs18: %v (a usage error naming the flag and the runtime expected)", err)
	}
}
