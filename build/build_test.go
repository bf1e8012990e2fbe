package build_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
)

// The identity of a build must not move by accident: it decides whether every function on an
// upgraded platform is rebuilt. A change here must be deliberate.
func TestKeyGolden(t *testing.T) {
	req := build.Request{Namespace: "sless-0123456789abcdef", Function: "hello", Runtime: "python3.11", Entrypoint: "handler.handle",
		CodeSHA256: strings.Repeat("ab", 32)}
	const runtimeImage = "127.0.0.1:5000/sless/runtime-python3.11@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if got, want := build.Key(req, runtimeImage), "a565a5003eb4f49735f195b208f3fead3df85b37de4c8ccdd96f2229f95d2120"; got != want {
		t.Errorf("build.Key moved: got %s, want %s", got, want)
	}
	other := req
	other.Namespace, other.Deps = "sless-ffffffffffffffff", deps.NewCache(nil, nil, nil, "")
	if build.Key(other, runtimeImage) != build.Key(req, runtimeImage) {
		t.Error("the key depends on the namespace or Deps; only code, runtime, runtime image and entrypoint decide the image")
	}
	for _, change := range []func(*build.Request){
		func(r *build.Request) { r.CodeSHA256 = strings.Repeat("cd", 32) },
		func(r *build.Request) { r.Runtime = "nodejs20" },
		func(r *build.Request) { r.Entrypoint = "main.handle" },
	} {
		r := req
		change(&r)
		if build.Key(r, runtimeImage) == build.Key(req, runtimeImage) {
			t.Errorf("the key does not change with %+v", r)
		}
	}
	if build.Key(req, runtimeImage+"x") == build.Key(req, runtimeImage) {
		t.Error("the key does not change with the runtime image")
	}
}

func TestIsUserError(t *testing.T) {
	for _, tc := range []struct {
		err    error
		user   bool
		reason string
	}{
		{&layers.EntryError{Path: "../x", Reason: "leaves the tree", Err: layers.ErrUnsafePath}, true, build.ReasonBuildFailed},
		{fmt.Errorf("wrapped: %w", &deps.InstallError{Output: "no matching distribution"}), true, build.ReasonDependenciesFailed},
		{fmt.Errorf("%w: --index-url", deps.ErrInvalidSpec), true, build.ReasonDependenciesFailed},
		{fmt.Errorf("%w: bad handler", oci.ErrInvalidSource), true, build.ReasonBuildFailed},
		{layers.ErrInvalidArchive, true, build.ReasonBuildFailed},
		{layers.ErrTooLarge, true, build.ReasonBuildFailed},
		{layers.ErrCompressionRatio, true, build.ReasonBuildFailed},
		{build.ErrCodeMissing, true, build.ReasonBuildFailed},
		{build.ErrCodeMismatch, true, build.ReasonBuildFailed},
		{build.ErrNoDeps, false, build.ReasonBuildFailed},
		{errors.New("pushing: 503 Service Unavailable"), false, build.ReasonBuildFailed},
		{context.DeadlineExceeded, false, build.ReasonBuildFailed},
		{&build.PendingError{Reason: "Job"}, false, build.ReasonBuildFailed},
	} {
		if got := build.IsUserError(tc.err); got != tc.user {
			t.Errorf("IsUserError(%v) = %v, want %v", tc.err, got, tc.user)
		}
		if got := build.Reason(tc.err); got != tc.reason {
			t.Errorf("Reason(%v) = %s, want %s", tc.err, got, tc.reason)
		}
	}
	if !build.IsPending(fmt.Errorf("x: %w", &build.PendingError{})) || build.IsPending(errors.New("x")) {
		t.Error("IsPending")
	}
}

type fixture struct {
	reg      string
	code     *codestore.Dir
	runtime  string // runtime image by digest
	pipeline *build.Pipeline
	mu       sync.Mutex
	observed []string
	deps     []string // each observation's Dependencies
}

func newFixture(t *testing.T, opts ...build.Option) *fixture {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	f := &fixture{reg: strings.TrimPrefix(srv.URL, "http://")}
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(f.reg + "/sless/runtime-python3.11:latest")
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	f.runtime = f.reg + "/sless/runtime-python3.11@" + d.String()
	if f.code, err = codestore.NewDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]build.Option{build.WithRegistry(f.reg), build.WithRuntimes(map[string]string{"python3.11": f.runtime}),
		build.WithTempDir(t.TempDir()), build.WithObserver(func(o build.Observation) {
			f.mu.Lock()
			f.observed = append(f.observed, o.Result)
			f.deps = append(f.deps, o.Dependencies)
			f.mu.Unlock()
		})}, opts...)
	if f.pipeline, err = build.New(f.code, b, opts...); err != nil {
		t.Fatal(err)
	}
	// Events are written behind the build: the last ones must be in before the code store's
	// directory is removed.
	t.Cleanup(f.pipeline.Events().Flush)
	return f
}

// upload stores a zip of files the way the API does and returns a request for it.
func (f *fixture) upload(t *testing.T, files map[string]string) build.Request {
	t.Helper()
	z := testenv.Zip(files)
	sum := sha256.Sum256(z)
	req := build.Request{Namespace: "sless-0123456789abcdef", Function: "hello", Runtime: "python3.11", Entrypoint: "handler.handle",
		CodeSHA256: hex.EncodeToString(sum[:])}
	if err := f.code.Put(context.Background(), codestore.Key(req.Namespace, req.Function, req.CodeSHA256), bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	return req
}

// copyTo stores req's archive for namespace ns too and returns the request there.
func (f *fixture) copyTo(t *testing.T, req build.Request, ns string) build.Request {
	t.Helper()
	ctx := context.Background()
	rc, err := f.code.Get(ctx, codestore.Key(req.Namespace, req.Function, req.CodeSHA256))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	buf.ReadFrom(rc)
	if err := f.code.Put(ctx, codestore.Key(ns, req.Function, req.CodeSHA256), &buf, int64(buf.Len())); err != nil {
		t.Fatal(err)
	}
	req.Namespace = ns
	return req
}

func (f *fixture) results() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.observed...)
}

// fakeDeps hands out a fixed layer or error and counts calls; with install it "installs" (a miss),
// and during the install reads what the build log says so far (seen).
type fakeDeps struct {
	layer   v1.Layer
	err     error
	calls   int
	install func() []apiv1.LogLine
	seen    []apiv1.LogLine
}

func (d *fakeDeps) Layer(_ context.Context, s deps.Spec, dir string) (deps.Result, error) {
	d.calls++
	if d.err != nil {
		return deps.Result{}, d.err
	}
	if d.install != nil {
		s.Installing()
		d.seen = d.install()
		fmt.Fprintln(s.Log, "Successfully installed six-1.16.0")
	}
	return deps.Result{Layer: d.layer, Key: "k-" + s.Runtime + dir, Cached: d.install == nil}, nil
}

func TestBuild(t *testing.T) {
	ctx := context.Background()
	depsLayer, err := layers.FromFS(fstest.MapFS{"six.py": {Data: []byte("x = 1\n")}}, layers.WithPrefix("/app/deps"))
	if err != nil {
		t.Fatal(err)
	}
	handler := map[string]string{"handler.py": "def handle(event):\n    return {}\n"}
	withReqs := map[string]string{"handler.py": handler["handler.py"], "requirements.txt": "six==1.16.0\n"}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		edit    func(*build.Request)
		deps    *fakeDeps
		check   func(t *testing.T, err error)
		layers  int // layers on top of the runtime's two
		outcome string
	}{
		{name: "code only", files: handler, layers: 1, outcome: "succeeded"},
		{name: "with dependencies", files: withReqs, deps: &fakeDeps{layer: depsLayer}, layers: 2, outcome: "succeeded"},
		{name: "dependencies installed", files: withReqs, deps: &fakeDeps{layer: depsLayer, install: func() []apiv1.LogLine { return nil }},
			layers: 2, outcome: "succeeded"},
		{name: "dependencies pending", files: withReqs, deps: &fakeDeps{err: &build.PendingError{Reason: "Job x"}},
			check: func(t *testing.T, err error) {
				if !build.IsPending(err) || build.IsUserError(err) {
					t.Errorf("err = %v, want pending", err)
				}
			}},
		{name: "dependencies failed", files: withReqs, deps: &fakeDeps{err: &deps.InstallError{Output: "boom"}}, outcome: "failed",
			check: func(t *testing.T, err error) {
				if !build.IsUserError(err) || build.Reason(err) != build.ReasonDependenciesFailed {
					t.Errorf("err = %v, want the installer's", err)
				}
			}},
		{name: "no deps configured", files: withReqs, outcome: "failed",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, build.ErrNoDeps) || build.IsUserError(err) {
					t.Errorf("err = %v, want ErrNoDeps (the platform's)", err)
				}
			}},
		{name: "unknown runtime", files: handler, edit: func(r *build.Request) { r.Runtime = "ruby3" }, outcome: "failed",
			check: func(t *testing.T, err error) {
				if !build.IsUserError(err) {
					t.Errorf("err = %v, want a user error", err)
				}
			}},
		{name: "bad entrypoint", files: handler, edit: func(r *build.Request) { r.Entrypoint = "no dots" }, outcome: "failed",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, oci.ErrInvalidSource) {
					t.Errorf("err = %v, want ErrInvalidSource", err)
				}
			}},
		{name: "code missing", files: handler, edit: func(r *build.Request) { r.CodeSHA256 = strings.Repeat("0", 64) }, outcome: "failed",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, build.ErrCodeMissing) {
					t.Errorf("err = %v, want ErrCodeMissing", err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			req := f.upload(t, tc.files)
			if tc.edit != nil {
				tc.edit(&req)
			}
			if tc.deps != nil {
				req.Deps = tc.deps
				if tc.deps.install != nil {
					tc.deps.install = func() []apiv1.LogLine {
						l, _ := fnlog.Load[apiv1.LogLine](ctx, f.code, fnlog.BuildKey(req.Namespace, req.Function))
						return l
					}
				}
			}
			res, err := f.pipeline.Build(ctx, req)
			if d := tc.deps; d != nil && d.install != nil {
				// The log is readable while the install runs, saying so.
				if n := len(d.seen); n == 0 || !strings.Contains(d.seen[n-1].Line, "cache miss, installing") {
					t.Errorf("the build log during the install: %+v", d.seen)
				}
			}
			if tc.check != nil {
				tc.check(t, err)
			} else if err != nil {
				t.Fatal(err)
			}
			if want := []string{tc.outcome}; tc.outcome == "" && len(f.results()) != 0 || tc.outcome != "" && strings.Join(f.results(), ",") != tc.outcome {
				t.Errorf("observed %v, want %v", f.results(), want)
			}
			checkBuildLog(t, f, req, err, res)
			if err != nil {
				return
			}
			if res.Key != f.pipeline.Key(req) || res.Key != build.Key(req, f.runtime) {
				t.Errorf("Result.Key %s is not the request's key", res.Key)
			}
			ref, err := name.NewDigest(res.Image)
			if err != nil || !strings.HasPrefix(res.Image, f.reg+"/"+req.Namespace+"/hello@sha256:") {
				t.Fatalf("image %q: %v", res.Image, err)
			}
			img, err := remote.Image(ref)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Image(img); err != nil {
				t.Fatal(err)
			}
			ls, _ := img.Layers()
			if len(ls) != 2+tc.layers {
				t.Errorf("%d layers, want %d", len(ls), 2+tc.layers)
			}
			if tc.deps != nil && (res.DepsKey == "" || res.DepsCached != (tc.deps.install == nil)) {
				t.Errorf("deps not reported: %+v", res)
			}
			want := map[bool]string{true: "cached", false: "installed"}[tc.deps == nil || tc.deps.install == nil]
			if tc.deps == nil {
				want = ""
			}
			f.mu.Lock()
			if last := f.deps[len(f.deps)-1]; last != want {
				t.Errorf("observed dependencies %q for %+v", last, res)
			}
			f.mu.Unlock()
			// The same request again gives the same image.
			again, err := f.pipeline.Build(ctx, req)
			if err != nil || again.Image != res.Image {
				t.Errorf("rebuild: %v %v, want %s", again, err, res.Image)
			}
			// Deleting twice: the second finds nothing and is fine.
			if err := f.pipeline.DeleteImages(ctx, res.Image); err != nil {
				t.Fatal(err)
			}
			if _, err := remote.Head(ref); !oci.IsNotFound(err) {
				t.Errorf("image still there after delete: %v", err)
			}
			if err := f.pipeline.DeleteImages(ctx, res.Image); err != nil {
				t.Errorf("deleting a deleted image: %v", err)
			}
		})
	}
}

// Someone who can write the code store must not ship code to a tenant: the build checks the bytes
// against the name they are stored under.
func TestBuildRefusesTamperedCode(t *testing.T) {
	f := newFixture(t)
	req := f.upload(t, map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	evil := testenv.Zip(map[string]string{"handler.py": "def handle(e):\n    return 'pwned'\n"})
	if err := f.code.Put(context.Background(), codestore.Key(req.Namespace, req.Function, req.CodeSHA256), bytes.NewReader(evil), int64(len(evil))); err != nil {
		t.Fatal(err)
	}
	_, err := f.pipeline.Build(context.Background(), req)
	if !errors.Is(err, build.ErrCodeMismatch) || !build.IsUserError(err) {
		t.Fatalf("err = %v, want ErrCodeMismatch", err)
	}
	if _, err := remote.Head(mustRef(f.reg + "/" + req.Namespace + "/hello:latest")); err == nil {
		t.Error("an image was pushed for tampered code")
	}
}

// A build that finds no free slot is pending at once (it never waits): beyond WithConcurrency,
// and beyond WithTenantConcurrency for one namespace, while other tenants still build.
func TestBuildSlots(t *testing.T) {
	blocked := make(chan struct{}, 2)
	release := make(chan struct{})
	f := newFixture(t, build.WithConcurrency(2), build.WithTenantConcurrency(1))
	hang := depsFunc(func() error { blocked <- struct{}{}; <-release; return &build.PendingError{Reason: "done"} })
	req := f.upload(t, map[string]string{"handler.py": "x", "requirements.txt": "six\n"})
	req.Deps = hang
	done := make(chan error, 2)
	go func() { _, err := f.pipeline.Build(context.Background(), req); done <- err }()
	<-blocked
	// The same tenant again: its one slot is taken.
	_, err := f.pipeline.Build(context.Background(), req)
	if pe, ok := errors.AsType[*build.PendingError](err); !ok || pe.Dependencies || pe.RetryAfter <= 0 {
		t.Errorf("a second build of the tenant: %v, want pending on a slot", err)
	}
	// Another tenant takes the second slot.
	other := f.copyTo(t, req, "sless-ffffffffffffffff")
	go func() { _, err := f.pipeline.Build(context.Background(), other); done <- err }()
	<-blocked
	// Now every slot is taken, whoever asks.
	third := f.copyTo(t, req, "sless-eeeeeeeeeeeeeeee")
	if _, err := f.pipeline.Build(context.Background(), third); !build.IsPending(err) {
		t.Errorf("a third tenant with both slots taken: %v, want pending", err)
	}
	close(release)
	for range 2 {
		if err := <-done; !build.IsPending(err) {
			t.Errorf("a held build: %v", err)
		}
	}
	// The slots are free again.
	third.Deps = depsFunc(func() error { return &build.PendingError{Reason: "next"} })
	if _, err := f.pipeline.Build(context.Background(), third); err == nil || err.Error() != "build pending: next" {
		t.Errorf("after the release: %v", err)
	}
}

type depsFunc func() error

func (d depsFunc) Layer(context.Context, deps.Spec, string) (deps.Result, error) {
	return deps.Result{}, d()
}

func mustRef(s string) name.Reference {
	r, err := name.ParseReference(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Which platform errors pass by themselves (the caller shows the build as still building).
func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("reading code: %w", codestore.ErrUnavailable), true},
		{fmt.Errorf("pushing: %w", &transport.Error{StatusCode: 503}), true},
		{fmt.Errorf("pushing: %w", &transport.Error{StatusCode: 429}), true},
		{fmt.Errorf("pushing: %w", &transport.Error{StatusCode: 403}), false},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{context.DeadlineExceeded, true},
		{errors.New("the cached layer was replaced in the store"), false},
	} {
		if got := build.IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// checkBuildLog: every build leaves its log (GET …/logs?source=build) and its stages as events
// (GET …/events) in the code store, whatever its outcome.
func checkBuildLog(t *testing.T, f *fixture, req build.Request, err error, res *build.Result) {
	t.Helper()
	ctx := context.Background()
	f.pipeline.Events().Flush()
	lines, lerr := fnlog.Load[apiv1.LogLine](ctx, f.code, fnlog.BuildKey(req.Namespace, req.Function))
	evs, eerr := fnlog.LoadEvents(ctx, f.code, req.Namespace, req.Function)
	if lerr != nil || eerr != nil || len(lines) < 2 {
		t.Fatalf("build log %v (%v), events %v (%v)", lines, lerr, evs, eerr)
	}
	text := ""
	for _, l := range lines {
		if l.Stream != apiv1.StreamBuild || l.Instance != "build" || l.Time.IsZero() {
			t.Errorf("build log line %+v", l)
		}
		text += l.Line + "\n"
	}
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason)
	}
	got := strings.Join(reasons, ",")
	last := lines[len(lines)-1].Line
	switch {
	case build.IsPending(err):
		if !strings.HasPrefix(last, "waiting: ") || got != "Stored,InstallingDependencies" {
			t.Errorf("pending build: last line %q, events %s", last, got)
		}
	case err != nil:
		if !strings.Contains(text, "failed after") || !strings.Contains(text, err.Error()) || reasons[len(reasons)-1] != apiv1.ReasonFailed ||
			evs[len(evs)-1].Type != apiv1.EventWarning {
			t.Errorf("failed build: last line %q, events %+v", last, evs)
		}
	default:
		if !strings.Contains(last, "built "+res.Image) || !strings.Contains(text, "stored: code "+req.CodeSHA256[:12]) ||
			!strings.HasSuffix(got, "Building,Pushing,Built") || evs[len(evs)-1].CodeSHA256 != req.CodeSHA256 {
			t.Errorf("build log:\n%s\nevents %s", text, got)
		}
		if res.DepsKey != "" && res.DepsCached && !strings.Contains(text, "dependency layer "+res.DepsKey[:min(12, len(res.DepsKey))]+": cache hit") {
			t.Errorf("the dependency layer is not in the build log:\n%s", text)
		}
		if res.DepsKey != "" && !res.DepsCached && (!strings.Contains(text, "Successfully installed six") || !strings.Contains(got, "Stored,InstallingDependencies,Building")) {
			t.Errorf("the install is not in the build log or the events:\n%s\nevents %s", text, got)
		}
	}
}

// A provided function's build needs an executable bootstrap at the code's root (the API refuses
// such uploads, but a PUT may move stored code to provided): without one it fails as the user's
// error naming bootstrap, pushing nothing; with one it builds, and a package.json beside it
// installs nothing.
func TestBuildProvided(t *testing.T) {
	f := newFixture(t)
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDeps{}
	p, err := build.New(f.code, b, build.WithRegistry(f.reg), build.WithRuntimes(map[string]string{apiv1.RuntimeProvided: f.runtime}),
		build.WithTempDir(t.TempDir()), build.WithDeps(d))
	if err != nil {
		t.Fatal(err)
	}
	store := func(fn string, z []byte) build.Request {
		sum := sha256.Sum256(z)
		req := build.Request{Namespace: "sless-0123456789abcdef", Function: fn, Runtime: apiv1.RuntimeProvided, Entrypoint: "handler.handle",
			CodeSHA256: hex.EncodeToString(sum[:])}
		if err := f.code.Put(context.Background(), codestore.Key(req.Namespace, fn, req.CodeSHA256), bytes.NewReader(z), int64(len(z))); err != nil {
			t.Fatal(err)
		}
		return req
	}
	_, err = p.Build(context.Background(), store("nobin", testenv.Zip(map[string]string{"handler.py": "x", "package.json": "{}"})))
	if !errors.Is(err, layers.ErrNotExecutable) || !build.IsUserError(err) || !strings.Contains(err.Error(), "bootstrap") {
		t.Fatalf("err = %v, want ErrNotExecutable naming bootstrap", err)
	}
	if _, err := remote.Head(mustRef(f.reg + "/sless-0123456789abcdef/nobin:latest")); err == nil {
		t.Error("an image was pushed without a bootstrap")
	}
	var z bytes.Buffer
	zw := zip.NewWriter(&z)
	for _, e := range []struct {
		name string
		mode os.FileMode
	}{{"bootstrap", 0o755}, {"package.json", 0o644}, {"requirements.txt", 0o644}} {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode)
		w, _ := zw.CreateHeader(h)
		w.Write([]byte("{}\n"))
	}
	zw.Close()
	res, err := p.Build(context.Background(), store("bin", z.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if res.DepsKey != "" || d.calls != 0 {
		t.Errorf("dependencies for provided: key %q, %d calls", res.DepsKey, d.calls)
	}
}
