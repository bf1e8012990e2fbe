package depcheck

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/sless-dev/sless/"

// any marks a package that may import whatever it needs: commands, benchmarks, tools and the
// test-only packages at the top of the graph (nothing imports them).
var anything = []string{"*"}

// allowed lists, per package, the module's packages it may import directly. Together the rules
// make the graph of DESIGN.md §2: layers ← deps ← oci ← build ← {local, operator/controllers};
// runspec and api/apiv1 are leaves everyone may use; lifecycle ← objects ← {every store, both
// backends, invoke, api}; api never imports operator or local, and only the commands (and the
// benchmarks, and api's own conformance suite) import api (TestOnlyCommandsImportTheRESTServer);
// the provider talks only to api/client and apiv1.
var allowed = map[string][]string{
	"api/apiv1":               {},
	"api/client":              {"api/apiv1"},
	"api/auth":                {"api/apiv1"},
	"api":                     {"activator", "api/apiv1", "api/auth", "async", "codestore", "delivery", "fnlog", "invoke", "layers", "lifecycle", "objects", "runspec"},
	"lifecycle":               {"api/apiv1"}, // the status state machine, pure
	"lifecycle/lifecycletest": {"api/apiv1", "lifecycle"},
	"objects":                 {"activator", "api/apiv1", "codestore", "lifecycle", "runspec"}, // the object model and the stores' contracts
	"invoke":                  {"activator", "api/apiv1", "objects", "runspec"},                // /fn/
	"activator":               {},
	"delivery":                {"api/apiv1"},                        // one retry and dead-letter rule for queue triggers and async invocations
	"async":                   {"api/apiv1", "delivery", "objects"}, // asynchronous invocation: the dispatcher, the in-memory queue
	"async/asynctest":         {"api/apiv1", "objects"},             // the contract every asynchronous queue passes
	"rabbitmq":                {"api/apiv1", "delivery"},            // a RabbitMQ trigger's consumer
	"api/memstore":            {"api/apiv1", "codestore", "lifecycle", "objects"},
	"api/apitest":             {"api", "api/apiv1", "api/auth", "api/client", "api/memstore", "async", "codestore", "fnlog", "invoke", "lifecycle", "objects", "rabbitmq"},
	"api/pgstore":             {"api/apiv1", "async", "objects"}, // the invocation history and the asynchronous queue in PostgreSQL (pgx, goose, prometheus)
	"layers":                  {},
	"deps":                    {"api/apiv1", "layers"},
	"oci":                     {"api/apiv1", "layers"},
	"runtimes":                {"api/apiv1"},
	"runspec":                 {"api/apiv1"},
	"codestore":               {},
	"fnlog":                   {"api/apiv1", "codestore"}, // build logs, events, stopped instances' logs in the code store
	"autoscale":               {"api/apiv1"},              // the scale decider of both backends: apiv1's ranges, else the standard library
	"build":                   {"api/apiv1", "codestore", "deps", "fnlog", "layers", "oci", "runtimes"},
	"operator/api/v1alpha1":   {"api/apiv1", "lifecycle"},
	"operator/resources":      {"api/apiv1", "operator/api/v1alpha1", "runspec"},
	"operator/controllers":    {"activator", "api/apiv1", "autoscale", "build", "codestore", "deps", "fnlog", "lifecycle", "operator/api/v1alpha1", "operator/resources", "runspec"},
	"operator/kubestore":      {"activator", "api/apiv1", "codestore", "fnlog", "lifecycle", "objects", "operator/api/v1alpha1", "operator/resources", "runspec"},
	"operator/consumer":       {"api/apiv1", "delivery", "operator/api/v1alpha1", "rabbitmq"}, // a namespace's rabbitmq consumer pod
	"operator/config":         {},
	"local/state":             {"api/apiv1", "async", "lifecycle", "objects"},
	"local/podman":            {},
	"local/network":           {"api/apiv1", "local/podman"}, // podman.HostIPv6: whether the bridges have IPv6 to confine
	"indexproxy":              {},
	"local/runner":            {"activator", "api/apiv1", "fnlog", "local/podman", "objects", "runspec"},
	"local/runtimeimages":     {"oci", "runtimes"},
	"local": {"activator", "api/apiv1", "autoscale", "build", "codestore", "deps", "fnlog", "indexproxy", "internal/regauth", "internal/registry", "lifecycle", "local/network", "local/podman", "local/runner",
		"local/runtimeimages", "local/state", "objects", "oci", "rabbitmq", "runspec", "delivery"},
	"provider":          {"api/apiv1", "api/client"},
	"internal/regauth":  {},
	"internal/registry": {"internal/regauth"},
	"internal/ports":    {},
	"internal/testenv":  {"api/apiv1", "api/client", "internal/ports", "internal/regauth", "internal/registry", "layers", "local/podman", "local/runtimeimages", "oci", "runtimes"},
	"internal/kubetest": {"internal/testenv", "operator/api/v1alpha1"},
	"internal/k1n":      {"api/apiv1", "codestore", "internal/faultproxy", "internal/kubetest", "internal/regauth", "internal/testenv"},
	"internal/depcheck": {},

	"internal/faultproxy": {"internal/ports"}, // a fault-injecting reverse proxy for tests

	"cmd/internal/options":         {"api", "api/apiv1", "api/auth", "autoscale", "runspec"}, // the flag groups both servers register
	"cmd/sless":                    anything,
	"cmd/sless-operator":           anything,
	"cmd/terraform-provider-sless": {"provider"},
	"bench":                        anything,
	"e2e/k8s":                      anything,
	"hack/k8s/pause":               {},
	"hack/k8s/smoke":               {},
	"hack/mkbase":                  {},
	"hack/operator-image":          {"layers"},
	"hack/testsum":                 {},
}

// noKubernetes may not depend on Kubernetes, directly or not: the build pipeline and the API run
// on a single host without it.
var noKubernetes = []string{"activator", "api/apiv1", "api/client", "api/auth", "api", "api/memstore", "api/pgstore", "invoke", "lifecycle", "objects", "layers", "deps", "oci", "runtimes",
	"runspec", "codestore", "build", "local/state", "local/podman", "local/runner", "local/runtimeimages", "provider", "delivery", "rabbitmq", "async"}

type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Deps                               []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func internal(imports []string) []string {
	var out []string
	for _, i := range imports {
		if rel, ok := strings.CutPrefix(i, mod); ok {
			out = append(out, rel)
		}
	}
	return out
}

// Every package imports only what its rule allows; its tests may add test helpers, but api's
// tests may not reach into a backend either.
func TestDependenciesPointOneWay(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		rule, ok := allowed[rel]
		if !ok {
			t.Errorf("%s has no rule in internal/depcheck: say which of the module's packages it may import", rel)
			continue
		}
		if slices.Equal(rule, anything) {
			continue
		}
		for _, dep := range internal(p.Imports) {
			if !slices.Contains(rule, dep) {
				t.Errorf("%s imports %s, which its rule does not allow", rel, dep)
			}
		}
		if rel == "api" || strings.HasPrefix(rel, "api/") {
			for _, dep := range internal(append(p.TestImports, p.XTestImports...)) {
				if strings.HasPrefix(dep, "operator") || strings.HasPrefix(dep, "local") {
					t.Errorf("%s's tests import %s: run the backend's conformance in the backend (api/apitest)", rel, dep)
				}
			}
		}
	}
	for rel := range allowed {
		found := false
		for _, p := range pkgs {
			found = found || p.ImportPath == mod+rel
		}
		if !found {
			t.Errorf("the rule for %s names no package: remove it", rel)
		}
	}
}

// restServerImporters may import the REST server (package api): the commands that run it (and
// their option groups), the benchmarks, and its conformance suite. Every store and backend takes the object model from
// package objects instead, so none links the HTTP server, JWT, or the API's metrics.
var restServerImporters = []string{"cmd/sless", "cmd/sless-operator", "cmd/internal/options", "bench", "api/apitest", "e2e/k8s"}

// restServerImports lists the packages of pkgs, outside restServerImporters, whose non-test code
// imports the REST server.
func restServerImports(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		if slices.Contains(p.Imports, mod+"api") && !slices.Contains(restServerImporters, rel) {
			bad = append(bad, rel)
		}
	}
	return bad
}

func TestOnlyCommandsImportTheRESTServer(t *testing.T) {
	for _, rel := range restServerImports(list(t)) {
		t.Errorf("%s imports the REST server (package api): take the object model and the store contracts from package objects", rel)
	}
	// The check itself: a store that imports the server is caught.
	if bad := restServerImports([]pkg{{ImportPath: mod + "local/state", Imports: []string{mod + "api", mod + "objects"}},
		{ImportPath: mod + "cmd/sless", Imports: []string{mod + "api"}}}); !slices.Equal(bad, []string{"local/state"}) {
		t.Errorf("a store importing the REST server: the check reports %v, want [local/state]", bad)
	}
}

func TestCoreWithoutKubernetes(t *testing.T) {
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		if !slices.Contains(noKubernetes, rel) {
			continue
		}
		for _, dep := range p.Deps {
			if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
				t.Errorf("%s depends on %s", rel, dep)
				break
			}
		}
	}
}

// The wire types and the client are what outside programs link against: the standard library and
// the listed module packages only.
func TestStdlibOnly(t *testing.T) {
	stdlibOnly := map[string][]string{"api/apiv1": nil, "api/client": {mod + "api/apiv1"}}
	for rel, ok := range stdlibOnly {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", mod+rel).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", rel, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != mod+rel && !slices.Contains(ok, dep) {
				t.Errorf("%s must use only the standard library but depends on %s", rel, dep)
			}
		}
	}
}

// The invocation history in PostgreSQL is the Kubernetes backend's, wired in by the commands: no
// library imports it (the API and the single host know only objects.Invocations), and it brings in
// only its driver, its migration library and metrics.
func TestPostgresStoreStaysAtTheEdge(t *testing.T) {
	thirdParty := []string{"github.com/jackc/pgx/v5", "github.com/pressly/goose/v3", "github.com/prometheus/client_golang/", "golang.org/x/sync/"}
	for _, p := range list(t) {
		rel := strings.TrimPrefix(p.ImportPath, mod)
		if rel == "api/pgstore" {
			for _, dep := range p.Imports {
				if strings.Contains(strings.Split(dep, "/")[0], ".") && !strings.HasPrefix(dep, mod) &&
					!slices.ContainsFunc(thirdParty, func(prefix string) bool { return strings.HasPrefix(dep, prefix) }) {
					t.Errorf("api/pgstore imports %s: only pgx, goose, prometheus and x/sync", dep)
				}
			}
			continue
		}
		if slices.Contains(p.Imports, mod+"api/pgstore") && !strings.HasPrefix(rel, "cmd/") && rel != "bench" {
			t.Errorf("%s imports api/pgstore: only cmd/ (and the benchmarks) wire it (others take an objects.Invocations)", rel)
		}
	}
}
