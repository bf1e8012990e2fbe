package deps_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/testenv"
)

func pySpec(req, ns string) deps.Spec {
	return deps.Spec{Runtime: "python3.11", RuntimeImage: "registry.test/sless/runtime-python3.11@sha256:" + strings.Repeat("a", 64),
		Files: map[string][]byte{deps.Requirements: []byte(req)}, Namespace: ns, IndexURL: "http://127.0.0.1:3141/simple"}
}

const pinned = "tinypkg==1.0 --hash=sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "\n"

// Golden keys: a change that moves one invalidates every cached layer, so it must be deliberate.
func TestKeyGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec deps.Spec
		key  string
	}{
		{"pip, tenant-scoped", pySpec("requests==2.31.0\n", "sless-0000000000000001"), "df253d4f6aa8d055fdcc6a3d072530f0a58922b1b4c43ef9c8afa44cd65bbede"},
		{"pip, pinned with hashes (shared)", pySpec(pinned, "sless-0000000000000001"), "8c41e96d776328ba4a576aceced9667d3891f62fb7008abebe3473a6de9be9db"},
		{"npm with lockfile", deps.Spec{Runtime: "nodejs20", RuntimeImage: "r@sha256:" + strings.Repeat("b", 64), Namespace: "sless-0000000000000002",
			Files: map[string][]byte{deps.PackageJSON: []byte(`{"dependencies":{"is-number":"7.0.0"}}`), deps.PackageLock: []byte(`{"lockfileVersion":3,"packages":{"":{},"node_modules/is-number":{"version":"7.0.0"}}}`)}}, "00bc027a99d9c88b25b8fa82be99f1272ccd2372d56870f6ebbdfd50d22b22ba"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := deps.Key(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if k != tc.key {
				t.Errorf("key %s, want %s", k, tc.key)
			}
		})
	}
}

func TestKeyScope(t *testing.T) {
	a, _ := deps.Key(pySpec("requests==2.31.0\n", "sless-a"))
	b, _ := deps.Key(pySpec("requests==2.31.0\n", "sless-b"))
	if a == b {
		t.Error("an install that may run package code is shared across tenants")
	}
	a, _ = deps.Key(pySpec(pinned, "sless-a"))
	b, _ = deps.Key(pySpec(pinned, "sless-b"))
	if a != b {
		t.Error("a fully pinned, binary-only install is not shared across tenants")
	}
	c, _ := deps.Key(pySpec("requests==2.31.1\n", "sless-a"))
	d, _ := deps.Key(pySpec("requests==2.31.0\n", "sless-a"))
	if c == d {
		t.Error("a changed manifest kept its key")
	}
	img := pySpec("x==1\n", "sless-a")
	e, _ := deps.Key(img)
	img.RuntimeImage = "other@sha256:" + strings.Repeat("c", 64)
	f, _ := deps.Key(img)
	if e == f {
		t.Error("another runtime image kept the key")
	}
}

func TestRequirementsRejected(t *testing.T) {
	for _, line := range []string{"--index-url http://evil/simple", "-i http://evil/simple", "--extra-index-url=http://evil",
		"-f ./wheels", "--find-links http://evil", "--trusted-host evil", "--no-index", "-r other.txt", "--constraint c.txt",
		// pip's own line rules: tabs split options, a backslash joins lines without a space, an
		// option may follow a requirement, a short option may carry its value.
		"--index-url\thttp://evil/simple", "--ind\\\nex-url http://evil/simple", "six==1.16.0 --index-url http://evil",
		"-ihttp://evil/simple", "  --no-index  # offline", "--extra-index-url\\\n  http://evil"} {
		_, err := deps.Key(pySpec("six==1.16.0\n"+line+"\n", "ns"))
		if !errors.Is(err, deps.ErrInvalidSpec) {
			t.Errorf("%q accepted: %v", line, err)
		}
	}
	// Comments and hashes are not options.
	for _, ok := range []string{"six==1.16.0  # --index-url is set by the platform", "# -i http://x", "six==1.16.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64)} {
		if _, err := deps.Key(pySpec(ok+"\n", "ns")); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	if _, err := deps.Key(deps.Spec{Runtime: "nodejs20", Files: map[string][]byte{deps.PackageJSON: []byte("{nope")}}); !errors.Is(err, deps.ErrInvalidSpec) {
		t.Errorf("bad package.json: %v", err)
	}
}

func TestInstallers(t *testing.T) {
	in, err := pySpec(pinned, "ns").Installer()
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(in.Argv, " ")
	for _, want := range []string{"pip install", "--target /out", "--no-compile", "--index-url http://127.0.0.1:3141/simple",
		"--trusted-host 127.0.0.1", "--only-binary=:all: --require-hashes"} {
		if !strings.Contains(argv, want) {
			t.Errorf("pip argv lacks %q: %s", want, argv)
		}
	}
	noLock := deps.Spec{Runtime: "nodejs20", Files: map[string][]byte{deps.PackageJSON: []byte(`{}`)}}
	in, _ = noLock.Installer()
	if in.Warning == "" || !strings.Contains(strings.Join(in.Argv, " "), "npm install --omit=dev") {
		t.Errorf("npm without a lockfile: %+v", in)
	}
	lock := deps.Spec{Runtime: "nodejs20", Files: map[string][]byte{deps.PackageJSON: []byte(`{}`), deps.PackageLock: []byte(`{"packages":{"node_modules/a":{"integrity":"sha512-x"}}}`)}}
	in, _ = lock.Installer()
	if in.Warning != "" || !strings.Contains(strings.Join(in.Argv, " "), "npm ci --omit=dev --ignore-scripts") {
		t.Errorf("npm with a complete lockfile: %+v", in)
	}
	if deps.Detect("python3.11", map[string][]byte{"handler.py": nil}) != nil || deps.Detect("nodejs20", map[string][]byte{deps.PackageLock: nil}) != nil {
		t.Error("Detect found manifests that are not there")
	}
}

// fakeResolver writes a fixed tree into outDir and counts how often it ran.
type fakeResolver struct {
	runs atomic.Int64
	fail error
	gate chan struct{}
}

func (f *fakeResolver) Resolve(_ context.Context, s deps.Spec, in deps.Installer, inDir, outDir string) error {
	f.runs.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	if f.fail != nil {
		return f.fail
	}
	if _, err := os.Stat(filepath.Join(inDir, deps.Requirements)); err != nil {
		return err
	}
	os.MkdirAll(filepath.Join(outDir, "tinypkg"), 0o755)
	return os.WriteFile(filepath.Join(outDir, "tinypkg", "__init__.py"), []byte("VALUE = 42\n"), 0o644)
}

func TestCacheResolvesOnce(t *testing.T) {
	reg := testenv.Registry(t)
	store, err := deps.NewRegistryStore(reg + "/sless/deps")
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeResolver{gate: make(chan struct{})}
	c := deps.NewCache(store, r, &deps.MemPins{}, t.TempDir())
	ctx := context.Background()
	spec := pySpec("tinypkg==1.0\n", "sless-a")
	var wg sync.WaitGroup
	results := make([]deps.Result, 5)
	errs := make([]error, 5)
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = c.Layer(ctx, spec, "/app/deps") }()
	}
	close(r.gate)
	wg.Wait()
	if n := r.runs.Load(); n != 1 {
		t.Fatalf("5 concurrent builds of one key resolved %d times, want 1", n)
	}
	d0, _ := results[0].Layer.Digest()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if d, _ := res.Layer.Digest(); d != d0 {
			t.Errorf("result %d has layer %s, want %s", i, d, d0)
		}
	}
	// A later build (a fresh cache, as after a restart) finds the layer in the registry.
	again, err := deps.NewCache(store, r, &deps.MemPins{}, t.TempDir()).Layer(ctx, spec, "/app/deps")
	if err != nil || !again.Cached || r.runs.Load() != 1 {
		t.Fatalf("second build: cached=%v runs=%d err=%v", again.Cached, r.runs.Load(), err)
	}
	if d, _ := again.Layer.Digest(); d != d0 {
		t.Errorf("cached layer %s, resolved %s", d, d0)
	}
	// Resolving the same key again from scratch gives the same bytes (deterministic layer).
	fresh, err := deps.NewCache(&deps.MemStore{}, &fakeResolver{}, &deps.MemPins{}, t.TempDir()).Layer(ctx, spec, "/app/deps")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fresh.Layer.Digest(); d != d0 {
		t.Errorf("re-resolved layer %s differs from %s", d, d0)
	}
}

func TestCacheFailureCachesNothing(t *testing.T) {
	store := &deps.MemStore{}
	r := &fakeResolver{fail: &deps.InstallError{Output: "ERROR: No matching distribution found for nosuchpkg"}}
	c := deps.NewCache(store, r, &deps.MemPins{}, t.TempDir())
	spec := pySpec("nosuchpkg==9\n", "ns")
	_, err := c.Layer(context.Background(), spec, "/app/deps")
	var ie *deps.InstallError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "nosuchpkg") {
		t.Fatalf("error %v", err)
	}
	key, _ := deps.Key(spec)
	if _, err := store.Get(context.Background(), key); !errors.Is(err, deps.ErrNotFound) {
		t.Error("a failed install was cached")
	}
	r.fail = nil
	if res, err := c.Layer(context.Background(), spec, "/app/deps"); err != nil || res.Cached || r.runs.Load() != 2 {
		t.Errorf("retry after a failure: %+v %v runs=%d", res, err, r.runs.Load())
	}
}

// What may be shared across tenants is only an install that runs no tenant code and fetches
// nothing the tenant chose. Each of these would run package code or fetch from elsewhere, so it
// must stay the tenant's own (its key depends on the namespace).
func TestShareableBypassesClosed(t *testing.T) {
	hash := "--hash=sha256:" + strings.Repeat("ab", 32)
	npm := func(lock string) deps.Spec {
		return deps.Spec{Runtime: "nodejs20", RuntimeImage: "r@sha256:" + strings.Repeat("b", 64), IndexURL: "http://10.88.0.1:4873",
			Files: map[string][]byte{deps.PackageJSON: []byte(`{}`), deps.PackageLock: []byte(lock)}}
	}
	entry := func(resolved string) string {
		return `{"lockfileVersion":3,"packages":{"":{},"node_modules/a":{"version":"1.0.0","integrity":"sha512-x","resolved":"` + resolved + `"}}}`
	}
	for _, tc := range []struct {
		name   string
		spec   deps.Spec
		shared bool
	}{
		{"pip pinned with hashes", pySpec("six==1.16.0 "+hash+"\n", ""), true},
		{"pip pinned, two hashes, one separate", pySpec("six==1.16.0 "+hash+" --hash sha256:"+strings.Repeat("cd", 32)+"\n", ""), true},
		{"pip pinned with a marker", pySpec("six==1.16.0 ; python_version >= \"3.8\" "+hash+"\n", ""), true},
		{"pip --no-binary on the line", pySpec("six==1.16.0 "+hash+" --no-binary six\n", ""), false},
		{"pip --no-binary=:all: on the line", pySpec("six==1.16.0 "+hash+" --no-binary=:all:\n", ""), false},
		{"pip --no-binary as its own line", pySpec("--no-binary :all:\nsix==1.16.0 "+hash+"\n", ""), false},
		{"pip --global-option", pySpec("six==1.16.0 "+hash+" --global-option=build_ext\n", ""), false},
		{"pip direct reference", pySpec("six @ https://evil.example/six-1.16.0.tar.gz "+hash+"\n", ""), false},
		{"pip direct reference without spaces", pySpec("six@https://evil.example/six.whl==1 "+hash+"\n", ""), false},
		{"pip unpinned", pySpec("six>=1 "+hash+"\n", ""), false},
		{"pip without a hash", pySpec("six==1.16.0\n", ""), false},
		{"npm from the public registry", npm(entry("https://registry.npmjs.org/a/-/a-1.0.0.tgz")), true},
		{"npm from the configured registry", npm(entry("http://10.88.0.1:4873/a/-/a-1.0.0.tgz")), true},
		{"npm from another host", npm(entry("https://evil.example/a/-/a-1.0.0.tgz")), false},
		{"npm from git", npm(entry("git+ssh://git@github.com/x/a.git#abc")), false},
		{"npm from a file", npm(entry("file:../a")), false},
		{"npm without integrity", npm(`{"lockfileVersion":3,"packages":{"":{},"node_modules/a":{"version":"1.0.0","resolved":"https://registry.npmjs.org/a/-/a-1.0.0.tgz"}}}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.spec, tc.spec
			a.Namespace, b.Namespace = "sless-a", "sless-b"
			ka, err := deps.Key(a)
			if err != nil {
				t.Fatal(err)
			}
			kb, _ := deps.Key(b)
			if shared := ka == kb; shared != tc.shared {
				t.Errorf("shared across tenants = %v, want %v", shared, tc.shared)
			}
		})
	}
}

// The registry's deps credentials (regauth) name the repositories the store writes: one layout.
func TestLayerRefMatchesRegistryCredentials(t *testing.T) {
	key := strings.Repeat("ab", 32)
	if got, want := deps.LayerRef("r:5000/sless/deps", key), "r:5000/"+regauth.DepsRepo(key)+":latest"; got != want {
		t.Errorf("LayerRef %s, the deps credential's repository %s", got, want)
	}
}
