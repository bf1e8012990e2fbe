// Package depcheck keeps the layering of DESIGN.md §2 honest: dependencies point one way.
package depcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/sless-dev/sless/"

// forbidden lists, per package, import path prefixes it must not depend on (directly or not).
var forbidden = map[string][]string{
	"layers":            {mod, "k8s.io/", "sigs.k8s.io/"},
	"oci":               {mod + "api", mod + "operator", mod + "provider", mod + "local", mod + "internal", "k8s.io/", "sigs.k8s.io/"},
	"internal/registry": {mod},
	"runtimes":          {mod, "k8s.io/", "sigs.k8s.io/"},
	"deps":              {mod + "api", mod + "oci", mod + "runtimes", mod + "local", mod + "operator", mod + "provider", mod + "internal", "k8s.io/", "sigs.k8s.io/"},
	"api":               {mod + "operator", mod + "provider", mod + "local", "k8s.io/", "sigs.k8s.io/"},
}

// stdlibOnly packages may import the standard library and the listed module packages, nothing else
// (the wire types and the client are what outside programs link against).
var stdlibOnly = map[string][]string{
	"api/apiv1":  nil,
	"api/client": {mod + "api/apiv1"},
}

func TestStdlibOnly(t *testing.T) {
	for pkg, allowed := range stdlibOnly {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != mod+pkg && !slices.Contains(allowed, dep) {
				t.Errorf("%s must use only the standard library but depends on %s", pkg, dep)
			}
		}
	}
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
				if strings.HasPrefix(dep, b) && !((pkg == "oci" || pkg == "deps") && dep == mod+"layers") && !(pkg == "oci" && dep == mod+"deps") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
