// Package depcheck keeps the layering of DESIGN.md §2 honest: dependencies point one way.
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/sless-dev/sless/"

// forbidden lists, per package, import path prefixes it must not depend on (directly or not).
var forbidden = map[string][]string{
	"layers":            {mod, "k8s.io/", "sigs.k8s.io/"},
	"oci":               {mod + "api", mod + "operator", mod + "provider", mod + "local", mod + "internal", "k8s.io/", "sigs.k8s.io/"},
	"internal/registry": {mod},
}

func TestDependenciesPointOneWay(t *testing.T) {
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == mod+pkg {
				continue
			}
			for _, b := range bad {
				if strings.HasPrefix(dep, b) && !(pkg == "oci" && dep == mod+"layers") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
