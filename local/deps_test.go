package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/testenv"
)

// wheel builds a pure-Python wheel in memory (PyPI is unreachable here; pip installs from a local
// simple index that serves it).
func wheel(t *testing.T, pkg, version, body string) (string, []byte) {
	t.Helper()
	return testenv.Wheel(pkg, version, body)
}

func TestDependencies(t *testing.T) {
	ix, err := testenv.StartPipIndex("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ix.Close)
	name1, whl := wheel(t, "tinypkg", "1.0", "VALUE = 42\n")
	ix.Add("tinypkg", name1, whl)
	u := startUpWith(t, "--pip-index-url", ix.URL)
	ns := u.c.Namespace()
	handler := "import tinypkg\ndef handle(event):\n    return {'value': tinypkg.VALUE, 'v': %d}\n"

	var firstKey, firstLayer string
	t.Run("pip from a local index", func(t *testing.T) {
		f := u.deploy(t, "pyd", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 1), "requirements.txt": "tinypkg==1.0\n"})
		if f.Status.Phase != apiv1.PhaseReady || f.Status.Build == nil || f.Status.Build.DepsKey == "" || f.Status.Build.DepsCached {
			t.Fatalf("status %+v build %+v", f.Status, f.Status.Build)
		}
		if code, body := u.get("/fn/" + ns + "/pyd"); code != 200 || !strings.Contains(body, `"value": 42`) {
			t.Fatalf("the handler cannot use its dependency: %d %s", code, body)
		}
		firstKey = f.Status.Build.DepsKey
		firstLayer = depsLayerDigest(t, u, f.Status.Image)
	})
	lookups := ix.Lookups.Load()
	if lookups == 0 {
		t.Fatal("pip never asked the index")
	}
	t.Run("code-only change runs no installer", func(t *testing.T) {
		f := u.deploy(t, "pyd", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 2), "requirements.txt": "tinypkg==1.0\n"})
		if !f.Status.Build.DepsCached || f.Status.Build.DepsKey != firstKey || ix.Lookups.Load() != lookups {
			t.Errorf("deps_cached=%v key %s (first %s), index lookups %d → %d", f.Status.Build.DepsCached, f.Status.Build.DepsKey, firstKey, lookups, ix.Lookups.Load())
		}
		if code, body := u.get("/fn/" + ns + "/pyd"); code != 200 || !strings.Contains(body, `"v": 2`) {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("another function with the same manifest shares the layer", func(t *testing.T) {
		f := u.deploy(t, "pyd2", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 3), "requirements.txt": "tinypkg==1.0\n"})
		if !f.Status.Build.DepsCached || ix.Lookups.Load() != lookups || depsLayerDigest(t, u, f.Status.Image) != firstLayer {
			t.Errorf("deps_cached=%v lookups %d → %d, layer %s vs %s", f.Status.Build.DepsCached, lookups, ix.Lookups.Load(), depsLayerDigest(t, u, f.Status.Image), firstLayer)
		}
	})
	t.Run("a changed manifest gets a new key", func(t *testing.T) {
		name2, whl2 := wheel(t, "tinypkg", "2.0", "VALUE = 2000\n")
		ix.Add("tinypkg", name2, whl2)
		f := u.deploy(t, "pyd2", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 4), "requirements.txt": "tinypkg==2.0\n"})
		if f.Status.Build.DepsCached || f.Status.Build.DepsKey == firstKey {
			t.Errorf("build %+v", f.Status.Build)
		}
		if code, body := u.get("/fn/" + ns + "/pyd2"); code != 200 || !strings.Contains(body, `"value": 2000`) {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("a failing install fails the function and caches nothing", func(t *testing.T) {
		f := u.deploy(t, "pyd", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 5), "requirements.txt": "nosuchpkg==1.0\n"})
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "nosuchpkg") {
			t.Fatalf("status %+v", f.Status)
		}
		if code, body := u.get("/fn/" + ns + "/pyd"); code != 200 || !strings.Contains(body, `"v": 2`) {
			t.Errorf("the previous version must keep serving: %d %s", code, body)
		}
		var keys []string
		for _, r := range catalog(t, u) {
			if strings.HasPrefix(r, "sless/deps/") {
				keys = append(keys, r)
			}
		}
		if len(keys) != 2 { // tinypkg 1.0 and 2.0, nothing for the failed install
			t.Errorf("deps cache holds %v, want the two successful keys", keys)
		}
	})
	t.Run("a re-install of one key gives the same layer", func(t *testing.T) {
		ix.Add("tinypkg", name1, whl)
		ref, _ := name.ParseReference(deps.LayerRef(u.RegAddr+"/sless/deps", firstKey))
		desc, err := remote.Head(ref, u.RegOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Delete(ref.Context().Digest(desc.Digest.String()), u.RegOpts()...); err != nil {
			t.Fatal(err)
		}
		f := u.deploy(t, "pyd3", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 6), "requirements.txt": "tinypkg==1.0\n"})
		if f.Status.Build.DepsCached || f.Status.Build.DepsKey != firstKey {
			t.Fatalf("build %+v: want a fresh install of the first key", f.Status.Build)
		}
		if got := depsLayerDigest(t, u, f.Status.Image); got != firstLayer {
			t.Errorf("pip's second install of the same key gave layer %s, the first %s (not deterministic)", got, firstLayer)
		}
	})
	// Every build metric moved with the builds above (3 installs, 1 failed, 2 cache hits, 6 builds
	// of which 1 failed, 6 uploads) and /fn/'s per-function series with the requests; Prometheus's
	// metrics linter (promtool check metrics) finds nothing.
	t.Run("metrics", func(t *testing.T) {
		code, m := u.Metrics("")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		for _, want := range []string{
			`sless_builds_total{result="succeeded"} 5`, `sless_builds_total{result="failed"} 1`,
			`sless_build_duration_seconds_count{result="succeeded"} 5`, `sless_build_duration_seconds_count{result="failed"} 1`,
			`sless_dependency_installs_total{result="succeeded",runtime="python3.11"} 3`,
			`sless_dependency_installs_total{result="failed",runtime="python3.11"} 1`,
			`sless_dependency_cache_hits_total{runtime="python3.11"} 2`,
			`sless_upload_bytes_count 6`,
			`sless_function_requests_total{code="200",function="pyd",namespace="` + ns + `"}`,
			`sless_function_request_duration_seconds_count{function="pyd2",namespace="` + ns + `"}`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if t.Failed() {
			t.Logf("%s\n%s", grepLines(m, "sless_build"), grepLines(m, "sless_dep"))
		}
		problems, err := promlint.New(strings.NewReader(m)).Lint()
		if err != nil || len(problems) != 0 {
			t.Errorf("promlint: %v %+v", err, problems)
		}
	})
	// Anyone who can push to the registry could replace a cached layer that other builds mount
	// (and a shared key is mounted by other tenants): the layer is pinned when first stored, and a
	// moved tag is refused. The function keeps serving what it served.
	t.Run("a cached layer replaced in the registry is refused", func(t *testing.T) {
		before, _ := u.c.GetFunction(context.Background(), "pyd3")
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "tinypkg"), 0o755)
		os.WriteFile(filepath.Join(dir, "tinypkg", "__init__.py"), []byte("VALUE = 'pwned'\n"), 0o644)
		evil, err := deps.LayerFromDir(dir, "/app/deps")
		if err != nil {
			t.Fatal(err)
		}
		store, _ := deps.NewRegistryStore(u.RegAddr+"/sless/deps", u.RegOpts()...)
		if _, err := store.Put(context.Background(), firstKey, evil); err != nil {
			t.Fatal(err)
		}
		f := u.deploy(t, "pyd3", "python3.11", map[string]string{"handler.py": fmt.Sprintf(handler, 7), "requirements.txt": "tinypkg==1.0\n"})
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "replaced in the store") {
			t.Fatalf("status %+v", f.Status)
		}
		if code, body := u.get("/fn/" + ns + "/pyd3"); code != 200 || !strings.Contains(body, `"value": 42`) || f.Status.Image != before.Status.Image {
			t.Errorf("the previous version must keep serving: %d %s (image %s, was %s)", code, body, f.Status.Image, before.Status.Image)
		}
	})
}

// Every language runtime installs with its own pip or npm, in its own runtime image: the same
// manifest on two runtimes of one language gets two keys (the image is part of the key), so
// python3.13 never mounts a layer pip of python3.11 installed, and each function imports its
// dependency on its own interpreter. The packages: a wheel built here (PyPI is unreachable), and
// is-number from the npm registry.
func TestDependenciesOnEveryRuntime(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "npm", err)
	}
	ix, err := testenv.StartPipIndex("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ix.Close)
	whlName, whl := wheel(t, "tinypkg", "1.0", "VALUE = 42\n")
	ix.Add("tinypkg", whlName, whl)
	dir := t.TempDir()
	pj := `{"name":"fn","version":"1.0.0","dependencies":{"is-number":"7.0.0"}}`
	os.WriteFile(filepath.Join(dir, "package.json"), []byte(pj), 0o644)
	cmd := exec.Command(npm, "install", "--package-lock-only", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install --package-lock-only: %v\n%s", err, out)
	}
	lock, _ := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	python := map[string]string{"requirements.txt": "tinypkg==1.0\n",
		"handler.py": "import sys, tinypkg\ndef handle(event):\n    return {'value': tinypkg.VALUE, 'python': '%d.%d' % sys.version_info[:2]}\n"}
	node := map[string]string{"package.json": pj, "package-lock.json": string(lock),
		"handler.js": "const isNumber = require('is-number');\n" +
			"exports.handle = async () => ({ five: isNumber(5), text: isNumber('x'), node: process.versions.node.split('.')[0] });\n"}

	u := startUpWith(t, "--pip-index-url", ix.URL)
	ns := u.c.Namespace()
	byKey := map[string]string{}
	for _, tc := range []struct {
		runtime string
		files   map[string]string
		want    []string
	}{
		{apiv1.RuntimePython311, python, []string{`"value": 42`, `"python": "3.11"`}},
		{apiv1.RuntimePython313, python, []string{`"value": 42`, `"python": "3.13"`}},
		{apiv1.RuntimeNodejs20, node, []string{`"five":true`, `"text":false`, `"node":"20"`}},
		{apiv1.RuntimeNodejs22, node, []string{`"five":true`, `"text":false`, `"node":"22"`}},
		{apiv1.RuntimeNodejs24, node, []string{`"five":true`, `"text":false`, `"node":"24"`}},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			lookups := ix.Lookups.Load()
			name := "deps-" + strings.ReplaceAll(tc.runtime, ".", "-")
			f := u.deploy(t, name, tc.runtime, tc.files)
			if f.Status.Phase != apiv1.PhaseReady || f.Status.Build == nil || f.Status.Build.DepsKey == "" || f.Status.Build.DepsWarning != "" {
				t.Fatalf("status %+v build %+v", f.Status, f.Status.Build)
			}
			if f.Status.Build.DepsCached {
				t.Errorf("%s mounted a cached layer (key %s): its own installer never ran", tc.runtime, f.Status.Build.DepsKey)
			}
			if other, ok := byKey[f.Status.Build.DepsKey]; ok {
				t.Errorf("%s and %s share the dependency key %s", tc.runtime, other, f.Status.Build.DepsKey)
			}
			byKey[f.Status.Build.DepsKey] = tc.runtime
			if strings.HasPrefix(tc.runtime, "python") && ix.Lookups.Load() == lookups {
				t.Errorf("the %s install never asked the index", tc.runtime)
			}
			code, body := u.get("/fn/" + ns + "/" + name)
			for _, w := range tc.want {
				if code != 200 || !strings.Contains(body, w) {
					t.Errorf("%d %s: want %s", code, body, w)
				}
			}
			// The same manifest again on this runtime is a cache hit.
			again := u.deploy(t, name+"-b", tc.runtime, tc.files)
			if !again.Status.Build.DepsCached || again.Status.Build.DepsKey != f.Status.Build.DepsKey {
				t.Errorf("same manifest, same runtime: %+v", again.Status.Build)
			}
		})
	}
	t.Run("metrics per runtime", func(t *testing.T) {
		_, m := u.Metrics("")
		for _, rt := range []string{apiv1.RuntimePython311, apiv1.RuntimePython313, apiv1.RuntimeNodejs20, apiv1.RuntimeNodejs22, apiv1.RuntimeNodejs24} {
			for _, want := range []string{`sless_dependency_installs_total{result="succeeded",runtime="` + rt + `"} 1`,
				`sless_dependency_cache_hits_total{runtime="` + rt + `"} 1`} {
				if !strings.Contains(m, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
		}
		if t.Failed() {
			t.Logf("%s", grepLines(m, "sless_dep"))
		}
	})
}

func startUpWith(t *testing.T, extra ...string) *up {
	t.Helper()
	s := testenv.StartSlessUp(t, t.TempDir(), "", "", extra...)
	return &up{SlessUp: s, c: s.Client, token: s.Token, url: s.URL, dataDir: s.DataDir}
}

// depsLayerDigest is the layer just below the code layer of an image (its deps layer).
func depsLayerDigest(t *testing.T, u *up, image string) string {
	t.Helper()
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref, u.RegOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	return m.Layers[len(m.Layers)-2].Digest.String()
}

// catalog lists the registry's repositories with the platform's credential.
func catalog(t *testing.T, u *up) []string {
	t.Helper()
	reg, err := name.NewRegistry(u.RegAddr, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	repos, err := remote.CatalogPage(reg, "", 1000, u.RegOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	return repos
}

// A dependency install runs the tenant's code (here an npm install script): it runs as the
// function's non-root user with no capabilities, no privilege escalation, a read-only root and
// bounded processes, and what it leaves in the layer says so.
func TestDependencyInstallIsConfined(t *testing.T) {
	probe := "id -u > uid.txt; grep -E '^(CapBnd|NoNewPrivs):' /proc/self/status > status.txt; " +
		"(touch /probe 2>/dev/null && echo rw || echo ro) > root.txt; awk '$2 == \"/\" {print $4}' /proc/self/mounts > mounts.txt"
	reg, err := testenv.StartNPMRegistry("127.0.0.1", testenv.NPMPackage{Name: "probe", Version: "1.0.0", Files: map[string]string{
		"package.json": `{"name":"probe","version":"1.0.0","main":"index.js","scripts":{"install":"sh probe.sh"}}`,
		"probe.sh":     probe,
		"index.js": "const fs = require('fs'); const r = (f) => fs.readFileSync(__dirname + '/' + f, 'utf8').trim();\n" +
			"module.exports = () => ({ uid: r('uid.txt'), status: r('status.txt'), root: r('root.txt'), mounts: r('mounts.txt') });\n"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	pj, lock := reg.Manifests("fn", "probe")
	// Without integrity the install may run scripts (it is the tenant's own, not shared); npm ci
	// runs a package's scripts when its lockfile entry says it has some.
	var lf map[string]any
	json.Unmarshal([]byte(lock), &lf)
	entry := lf["packages"].(map[string]any)["node_modules/probe"].(map[string]any)
	delete(entry, "integrity")
	entry["hasInstallScript"] = true
	b, _ := json.Marshal(lf)
	lock = string(b)
	u := startUpWith(t, "--npm-registry", reg.URL)
	f := u.deploy(t, "confined", "nodejs20", map[string]string{"package.json": pj, "package-lock.json": lock,
		"handler.js": "exports.handle = async () => require('probe')();\n"})
	if f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("status %+v", f.Status)
	}
	code, body := u.get("/fn/" + u.c.Namespace() + "/confined")
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if got["uid"] != "65532" || !strings.Contains(got["status"], "CapBnd:\t0000000000000000") || !strings.Contains(got["status"], "NoNewPrivs:\t1") ||
		got["root"] != "ro" || !strings.HasPrefix(got["mounts"], "ro") {
		t.Errorf("the install script ran as %v", got)
	}
}

// One tenant's builds that hang (here: install scripts that never end) hold that tenant's build
// slot only: another tenant's function is built and served meanwhile.
func TestOneTenantsStuckBuildsDoNotBlockAnother(t *testing.T) {
	reg, err := testenv.StartNPMRegistry("127.0.0.1", testenv.NPMPackage{Name: "hang", Version: "1.0.0", Files: map[string]string{
		"package.json": `{"name":"hang","version":"1.0.0","main":"index.js","scripts":{"install":"sleep 600"}}`, "index.js": "module.exports = 1;\n"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	pj, lock := reg.Manifests("fn", "hang")
	var lf map[string]any
	json.Unmarshal([]byte(lock), &lf)
	entry := lf["packages"].(map[string]any)["node_modules/hang"].(map[string]any)
	delete(entry, "integrity")
	entry["hasInstallScript"] = true
	b, _ := json.Marshal(lf)
	u := startUpWith(t, "--npm-registry", reg.URL)
	ctx := context.Background()
	for i := range 3 {
		name := fmt.Sprintf("stuck-%d", i)
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: name, Runtime: "nodejs20"}); err != nil {
			t.Fatal(err)
		}
		z := testenv.Zip(map[string]string{"package.json": pj, "package-lock.json": string(b), "handler.js": "exports.handle = async () => 1;\n"})
		if _, err := u.c.Upload(ctx, name, bytes.NewReader(z), int64(len(z))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, func() bool {
		f, _ := u.c.GetFunction(ctx, "stuck-2")
		return f != nil && f.Status.Phase == apiv1.PhaseBuilding
	}, "the stuck tenant's builds to start")

	bob := otherTenant(t, u, "bob@example.com")
	if _, err := bob.CreateFunction(ctx, apiv1.Function{Name: "free", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	z := testenv.Zip(map[string]string{"handler.py": "def handle(e):\n    return 'free'\n"})
	start := time.Now()
	if _, err := bob.Upload(ctx, "free", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		f, _ := bob.GetFunction(ctx, "free")
		return f != nil && f.Status.Phase == apiv1.PhaseReady
	}, "the other tenant's function to be Ready")
	t.Logf("the other tenant's function was Ready %v after its upload, with three builds of the first tenant hanging", time.Since(start).Round(time.Millisecond))
	if f, _ := u.c.GetFunction(ctx, "stuck-1"); f == nil || f.Status.Phase != apiv1.PhaseBuilding {
		t.Errorf("the stuck tenant's second build: %+v", f)
	}
}
