package oci_test

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"golang.org/x/sync/errgroup"

	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
)

var reg string // host:port of the real Distribution registry for this package

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sless-oci-registry-")
	if err != nil {
		panic(err)
	}
	s, err := testenv.StartRegistry(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting registry:", err)
		os.Exit(1)
	}
	reg = s.Addr()
	code := m.Run()
	s.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// counter is a transport that records every registry request, for asserting what a push sent.
type counter struct {
	mu   sync.Mutex
	reqs []string // "METHOD path?query"
	next http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	line := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		line += "?" + r.URL.RawQuery
	}
	c.reqs = append(c.reqs, line)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) reset() { c.mu.Lock(); c.reqs = nil; c.mu.Unlock() }

func (c *counter) count(method, contains string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, contains) {
			n++
		}
	}
	return n
}

func (c *counter) dump() string { c.mu.Lock(); defer c.mu.Unlock(); return strings.Join(c.reqs, "\n") }

func newCounter() *counter { return &counter{next: http.DefaultTransport.(*http.Transport).Clone()} }

// baseImage is a small deterministic runtime image: two layers, OCI media types, a Cmd and Env.
func baseImage(t testing.TB, platform string) v1.Image {
	t.Helper()
	l1, err := layers.FromFS(fstest.MapFS{"os-release": {Data: []byte("ID=sless-test " + platform + "\n")}}, layers.WithPrefix("/etc"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := layers.FromFS(fstest.MapFS{"server.py": {Data: []byte("print('server')\n")}}, layers.WithPrefix("/app"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", platform
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "PYTHONPATH=/app/deps:/app/function", "PORT=9000"}
	cf.Config.Cmd = []string{"python3", "/app/server.py"}
	cf.Config.Labels = map[string]string{"runtime.label": "kept"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func pushBase(t testing.TB, repo string, img v1.Image) string {
	t.Helper()
	ref := reg + "/" + repo + ":latest"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func zipOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range sortedKeys(files) {
		w, _ := zw.Create(n)
		io.WriteString(w, files[n])
	}
	zw.Close()
	return buf.Bytes()
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func zipSource(runtime string, z []byte) oci.Source {
	return oci.Source{RuntimeImage: runtime, Zip: bytes.NewReader(z), ZipSize: int64(len(z)),
		Handler: "handler.handle", Function: "hello", Namespace: "sless-0123456789abcdef", Runtime: "python3.11"}
}

func TestBuildConfigAndLayout(t *testing.T) {
	ctx := context.Background()
	base := pushBase(t, "runtimes/config", baseImage(t, "amd64"))
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	z := zipOf(t, map[string]string{"handler.py": "def handle(e):\n    return e\n"})
	res, err := b.Build(ctx, zipSource(base, z))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	ref, err := b.Push(ctx, res, reg+"/fn/config:v1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image: %v", err)
	}
	cf, _ := img.ConfigFile()
	wantEnv := []string{"PATH=/usr/bin:/bin", "PYTHONPATH=/app/deps:/app/function", "PORT=9000", "HANDLER=handler.handle"}
	if strings.Join(cf.Config.Env, " ") != strings.Join(wantEnv, " ") {
		t.Errorf("Env = %q, want %q (the runtime's PORT kept, HANDLER added, nothing else)", cf.Config.Env, wantEnv)
	}
	if cf.Config.User != "65532:65532" || cf.Config.WorkingDir != "/app/function" {
		t.Errorf("User %q WorkingDir %q", cf.Config.User, cf.Config.WorkingDir)
	}
	if strings.Join(cf.Config.Cmd, " ") != "python3 /app/server.py" {
		t.Errorf("Cmd = %q, want the runtime's", cf.Config.Cmd)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("Created = %v, want the epoch", cf.Created)
	}
	baseRef, _ := name.ParseReference(base)
	baseDesc, _ := remote.Head(baseRef)
	sum := fmt.Sprintf("sha256:%x", sha256Sum(z))
	want := map[string]string{
		"org.opencontainers.image.base.name":   base,
		"org.opencontainers.image.base.digest": baseDesc.Digest.String(),
		"org.opencontainers.image.created":     "1970-01-01T00:00:00Z",
		"org.opencontainers.image.revision":    sum,
		"dev.sless.function":                   "hello",
		"dev.sless.namespace":                  "sless-0123456789abcdef",
		"dev.sless.runtime":                    "python3.11",
		"runtime.label":                        "kept",
	}
	for k, v := range want {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	m, _ := img.Manifest()
	if m.Annotations["org.opencontainers.image.base.digest"] != baseDesc.Digest.String() || m.Annotations["org.opencontainers.image.revision"] != sum {
		t.Errorf("manifest annotations %v", m.Annotations)
	}
	if len(m.Layers) != 3 {
		t.Fatalf("%d layers, want base 2 + code 1", len(m.Layers))
	}
	last := cf.History[len(cf.History)-1]
	if last.CreatedBy != "sless: code" || last.Comment != sum {
		t.Errorf("last history entry %+v", last)
	}
	if res.Base.DigestStr() != baseDesc.Digest.String() {
		t.Errorf("Result.Base %s, want %s", res.Base, baseDesc.Digest)
	}
}

// Same source + same runtime digest ⇒ same image digest, across builders; golden so that a change
// that moves it is deliberate.
func TestBuildDeterministicGolden(t *testing.T) {
	ctx := context.Background()
	base := pushBase(t, "runtimes/golden", baseImage(t, "amd64"))
	z := zipOf(t, map[string]string{"handler.py": "def handle(e):\n    return {'ok': True}\n", "lib/util.py": "X = 1\n"})
	var digests []string
	for i := 0; i < 2; i++ {
		b, err := oci.NewBuilder()
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Build(ctx, zipSource(base, z))
		if err != nil {
			t.Fatal(err)
		}
		d, _ := res.Digest()
		digests = append(digests, d.String())
		res.Close()
	}
	if digests[0] != digests[1] {
		t.Fatalf("rebuild changed the digest: %v", digests)
	}
	// The registry address is part of the base.name label, so the golden value is computed for a
	// fixed name: rebuild with the registry host rewritten is not possible; compare the config instead.
	const golden = "sha256:fff338d4a4c7151bd09ae942deffd541eba84517d26d8d15335a8d1c636503c8"
	if got := configDigestWithoutHost(t, base, z); got != golden {
		t.Errorf("config digest (host-independent) %s, want %s", got, golden)
	}
}

// configDigestWithoutHost builds with the base reached through a fixed alias so the label does not
// depend on the port the test registry got.
func configDigestWithoutHost(t *testing.T, base string, z []byte) string {
	t.Helper()
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Build(context.Background(), zipSource(base, z))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	cf, _ := res.Image.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config.Labels["org.opencontainers.image.base.name"] = "registry.test/runtimes/golden:latest"
	img, _ := mutate.ConfigFile(res.Image, cf)
	cd, _ := img.ConfigName()
	return cd.String()
}

func TestBadSourceNothingPushed(t *testing.T) {
	ctx := context.Background()
	base := pushBase(t, "runtimes/bad", baseImage(t, "amd64"))
	c := newCounter()
	b, err := oci.NewBuilder(oci.WithTransport(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  oci.Source
		want error
	}{
		{"zip slip", zipSource(base, zipOf(t, map[string]string{"../../etc/cron.d/x": "boom"})), layers.ErrUnsafePath},
		{"whiteout", zipSource(base, zipOf(t, map[string]string{".wh.server.py": ""})), layers.ErrUnsafePath},
		{"not a zip", zipSource(base, []byte("PK nope")), layers.ErrInvalidArchive},
		{"bad handler", oci.Source{RuntimeImage: base, Dir: fstest.MapFS{"a.py": {}}, Handler: "no dots here"}, oci.ErrInvalidSource},
		{"no code", oci.Source{RuntimeImage: base, Handler: "handler.handle"}, oci.ErrInvalidSource},
		{"bad runtime ref", oci.Source{RuntimeImage: "UPPER/Case::", Dir: fstest.MapFS{"a.py": {}}, Handler: "a.b"}, oci.ErrInvalidSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.reset()
			res, err := b.Build(ctx, tc.src)
			if err == nil {
				res.Close()
				t.Fatal("built; want an error")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			for _, m := range []string{"POST", "PUT", "PATCH"} {
				if n := c.count(m, "/v2/"); n != 0 {
					t.Errorf("%d %s requests; nothing may be written:\n%s", n, m, c.dump())
				}
			}
		})
	}
	// The target repository never came into existence.
	if _, err := remote.List(mustRepo(t, reg+"/fn/bad")); err == nil {
		t.Error("repository fn/bad exists after only failed builds")
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustRepo(t *testing.T, s string) name.Repository {
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A code-only rebuild uploads exactly one layer blob, the config and the manifest; the runtime's
// layers are mounted the first time and never downloaded; an identical re-push uploads nothing.
func TestPushUploadsOnlyWhatIsNew(t *testing.T) {
	ctx := context.Background()
	base := pushBase(t, "runtimes/count", baseImage(t, "amd64"))
	c := newCounter()
	b, err := oci.NewBuilder(oci.WithTransport(c))
	if err != nil {
		t.Fatal(err)
	}
	build := func(body string) *oci.Result {
		res, err := b.Build(ctx, zipSource(base, zipOf(t, map[string]string{"handler.py": body})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Close() })
		return res
	}
	uploads := func() int { return c.count("PUT", "/blobs/uploads/") }

	// First push into a new repository: 2 base layers mounted, code + config uploaded.
	first := build("v1")
	if _, err := b.Push(ctx, first, reg+"/fn/count:latest"); err != nil {
		t.Fatal(err)
	}
	if n := c.count("POST", "mount="); n != 2 {
		t.Errorf("first push: %d mount requests, want 2 (the base layers):\n%s", n, c.dump())
	}
	if n := uploads(); n != 2 {
		t.Errorf("first push: %d blob uploads, want 2 (code layer + config):\n%s", n, c.dump())
	}
	if n := c.count("GET", "/blobs/sha256:"); n != 1 {
		t.Errorf("%d blob downloads, want 1 (the runtime config only; base layers are never downloaded):\n%s", n, c.dump())
	}

	c.reset()
	second := build("v2")
	if _, err := b.Push(ctx, second, reg+"/fn/count:latest"); err != nil {
		t.Fatal(err)
	}
	if n := uploads(); n != 2 {
		t.Errorf("code-only rebuild: %d blob uploads, want 2 (code layer + config):\n%s", n, c.dump())
	}
	if n := c.count("PUT", "/manifests/"); n != 1 {
		t.Errorf("code-only rebuild: %d manifest PUTs, want 1", n)
	}
	if n := c.count("POST", "mount="); n != 0 {
		t.Errorf("code-only rebuild: %d mounts, want 0 (base layers known to be there)", n)
	}
	if n := c.count("GET", "/blobs/"); n != 0 {
		t.Errorf("code-only rebuild downloaded %d blobs, want 0:\n%s", n, c.dump())
	}
	pushed, err := remote.Image(mustRef(t, reg+"/fn/count:latest"))
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(pushed); err != nil {
		t.Fatalf("validate.Image after a code-only push: %v", err)
	}
	if d1, _ := pushed.Digest(); true {
		if d2, _ := second.Digest(); d1 != d2 {
			t.Fatalf("registry has %s, built %s", d1, d2)
		}
	}

	// The same image again, from a fresh builder (no in-process memory of what was pushed).
	c.reset()
	b2, _ := oci.NewBuilder(oci.WithTransport(c))
	again, err := b2.Build(ctx, zipSource(base, zipOf(t, map[string]string{"handler.py": "v2"})))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	d1, _ := second.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("identical rebuild: digest %s != %s", d2, d1)
	}
	if _, err := b2.Push(ctx, again, reg+"/fn/count:latest"); err != nil {
		t.Fatal(err)
	}
	if n := uploads() + c.count("PATCH", "/blobs/") + c.count("PUT", "/manifests/"); n != 0 {
		t.Errorf("identical re-push wrote %d times, want 0:\n%s", n, c.dump())
	}
}

// When what the Builder remembers about a repository is stale (a blob was deleted there), the push
// still succeeds: the Pusher that remembered it fails, and a fresh one checks and restores it.
func TestPushRecoversFromLostBlob(t *testing.T) {
	ctx := context.Background()
	base := pushBase(t, "runtimes/lost", baseImage(t, "amd64"))
	b, _ := oci.NewBuilder()
	push := func(body string) name.Digest {
		res, err := b.Build(ctx, zipSource(base, zipOf(t, map[string]string{"handler.py": body})))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Close()
		d, err := b.Push(ctx, res, reg+"/fn/lost:latest")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := push("v1")
	img, _ := remote.Image(first)
	m, _ := img.Manifest()
	req, _ := http.NewRequest(http.MethodDelete, "http://"+reg+"/v2/fn/lost/blobs/"+m.Layers[0].Digest.String(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("deleting a base layer from the repository: %v %v", err, resp)
	}
	second := push("v2")
	got, err := remote.Image(second)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(got); err != nil {
		t.Fatalf("validate.Image: %v", err)
	}
}

func TestIndexRuntime(t *testing.T) {
	ctx := context.Background()
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: baseImage(t, "amd64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: baseImage(t, "arm64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	ref, _ := name.ParseReference(reg + "/runtimes/multi:latest")
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	b, _ := oci.NewBuilder()
	res, err := b.Build(ctx, zipSource(ref.String(), zipOf(t, map[string]string{"handler.py": "x"})))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	if res.Index == nil {
		t.Fatal("an index runtime must give an index")
	}
	out, err := b.Push(ctx, res, reg+"/fn/multi:latest")
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Index(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(got); err != nil {
		t.Fatalf("validate.Index: %v", err)
	}
	im, _ := got.IndexManifest()
	if len(im.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(im.Manifests))
	}
	codeDigest, _ := res.Code.Digest()
	for _, d := range im.Manifests {
		img, _ := got.Image(d.Digest)
		m, _ := img.Manifest()
		if len(m.Layers) != 3 || m.Layers[2].Digest != codeDigest {
			t.Errorf("%s: layers %v, want the code layer last", d.Platform, m.Layers)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != d.Platform.Architecture {
			t.Errorf("platform %s has config for %s", d.Platform, cf.Architecture)
		}
	}
}

// The real crane binary, as a user would run it, sees the labels and the layer count.
func TestCraneSeesImage(t *testing.T) {
	crane, err := testenv.Tool("crane")
	if err != nil {
		testenv.Missing(t, "crane", err)
	}
	ctx := context.Background()
	base := pushBase(t, "runtimes/crane", baseImage(t, "amd64"))
	b, _ := oci.NewBuilder()
	res, err := b.Build(ctx, zipSource(base, zipOf(t, map[string]string{"handler.py": "x"})))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	ref, err := b.Push(ctx, res, reg+"/fn/crane:v1")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := exec.Command(crane, "config", ref.String()).Output()
	if err != nil {
		t.Fatalf("crane config: %v", err)
	}
	for _, want := range []string{`"dev.sless.function":"hello"`, `"org.opencontainers.image.revision":"sha256:`, `"User":"65532:65532"`, `"HANDLER=handler.handle"`} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("crane config lacks %s:\n%s", want, cfg)
		}
	}
	man, err := exec.Command(crane, "manifest", reg+"/fn/crane:v1").Output()
	if err != nil {
		t.Fatalf("crane manifest: %v", err)
	}
	if n := strings.Count(string(man), `"application/vnd.oci.image.layer.v1.tar+gzip"`); n != 3 {
		t.Errorf("crane manifest shows %d layers, want 3:\n%s", n, man)
	}
	dig, err := exec.Command(crane, "digest", reg+"/fn/crane:v1").Output()
	if err != nil || strings.TrimSpace(string(dig)) != ref.DigestStr() {
		t.Errorf("crane digest %q (%v), want %s", dig, err, ref.DigestStr())
	}
}

// BenchmarkCodeOnlyPush is one code-only rebuild and push (a new 10 KB code layer onto a runtime
// already in the repository) against the real registry on disk.
func BenchmarkCodeOnlyPush(b *testing.B) {
	ctx := context.Background()
	base := pushBase(b, "runtimes/bench", baseImage(b, "amd64"))
	code := strings.Repeat("# padding\n", 1000)
	bl, err := oci.NewBuilder()
	if err != nil {
		b.Fatal(err)
	}
	push := func(i int) {
		res, err := bl.Build(ctx, zipSource(base, zipOf(b, map[string]string{"handler.py": fmt.Sprintf("v = %d\n%s", i, code)})))
		if err != nil {
			b.Fatal(err)
		}
		defer res.Close()
		if _, err := bl.Push(ctx, res, reg+"/fn/bench:latest"); err != nil {
			b.Fatal(err)
		}
	}
	push(-1) // the first push mounts the runtime; what follows is code-only
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		push(i)
	}
}

// WithInsecure allows plain HTTP, nothing more: a registry whose TLS certificate does not verify
// is refused unless WithSkipTLSVerify says otherwise.
func TestInsecureDoesNotSkipTLSVerification(t *testing.T) {
	srv := httptest.NewTLSServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	ctx := context.Background()
	baseRef := mustRef(t, host+"/runtimes/tls:latest")
	push := func(opts ...oci.Option) error {
		b, err := oci.NewBuilder(opts...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Build(ctx, zipSource(baseRef.String(), zipOf(t, map[string]string{"handler.py": "x"})))
		if err != nil {
			return err
		}
		defer res.Close()
		_, err = b.Push(ctx, res, host+"/fn/tls:latest")
		return err
	}
	// The base image, written with the server's own client (which trusts its certificate).
	if err := remote.Write(baseRef, baseImage(t, "amd64"), remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	if err := push(oci.WithInsecure(true)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("WithInsecure against an unverifiable certificate: %v, want a certificate error", err)
	}
	if err := push(oci.WithSkipTLSVerify(true)); err != nil {
		t.Errorf("WithSkipTLSVerify: %v", err)
	}
}

// What garbage collection reads and writes through the Builder, against the real registry: tags
// added by digest, tag and catalog listings over more than one page, digests of tags, and a
// repository or tag that does not exist.
func TestTagsAndCatalog(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	b, err := oci.NewBuilder(oci.WithTransport(c))
	if err != nil {
		t.Fatal(err)
	}
	repo := reg + "/gc/tags"
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mustRef(t, repo+":latest"), img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	const n = 110 // more than one page
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error { return b.Tag(ctx, repo+"@"+d.String(), fmt.Sprintf("v-%03d", i)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	c.reset()
	tags, err := b.ListTags(ctx, repo)
	if err != nil || len(tags) != n+1 || !slices.Contains(tags, "latest") || !slices.Contains(tags, fmt.Sprintf("v-%03d", n-1)) {
		t.Errorf("ListTags = %d tags, %v; want %d", len(tags), err, n+1)
	}
	if pages := c.count("GET", "/tags/list"); pages < 2 {
		t.Errorf("ListTags read %d pages, want the test to cover more than one", pages)
	}
	if got, err := b.Digest(ctx, repo+":v-007"); got != d.String() || err != nil {
		t.Errorf("Digest of a version tag = %q, %v; want %s", got, err, d)
	}
	if _, err := b.Digest(ctx, repo+":nope"); !oci.IsNotFound(err) {
		t.Errorf("Digest of a missing tag: %v, want not found", err)
	}
	if tags, err := b.ListTags(ctx, reg+"/gc/no-such-repo"); tags != nil || err != nil {
		t.Errorf("ListTags of a missing repository = %v, %v; want none", tags, err)
	}
	for _, bad := range [][2]string{{repo + ":latest", "x"}, {repo + "@" + d.String(), "no spaces"}} {
		if err := b.Tag(ctx, bad[0], bad[1]); !errors.Is(err, oci.ErrInvalidSource) {
			t.Errorf("Tag(%q, %q): %v, want ErrInvalidSource", bad[0], bad[1], err)
		}
	}

	var want []string
	for i := range n {
		r := fmt.Sprintf("gc/catalog/r%03d", i)
		want = append(want, r)
		ref := mustRef(t, reg+"/"+r+":latest")
		g.Go(func() error { return remote.Write(ref, empty.Image) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	c.reset()
	repos, err := b.Catalog(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if !slices.Contains(repos, r) {
			t.Fatalf("Catalog (%d repositories) lacks %s", len(repos), r)
		}
	}
	if pages := c.count("GET", "/_catalog"); pages < 2 {
		t.Errorf("Catalog read %d pages, want the test to cover more than one", pages)
	}
}

// A build refused after the runtime image was resolved (here: no executable bootstrap, with a
// ctx that ends with the build, as the pipeline's does) leaves the cached runtime usable: the next
// build on it succeeds rather than failing with "context canceled".
func TestRefusedBuildLeavesRuntimeUsable(t *testing.T) {
	base := pushBase(t, "runtimes/refused", baseImage(t, "amd64"))
	b, err := oci.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	src := zipSource(base, zipOf(t, map[string]string{"handler.py": "x"}))
	src.Executable = "bootstrap"
	ctx, cancel := context.WithCancel(context.Background())
	_, err = b.Build(ctx, src)
	cancel()
	if !errors.Is(err, layers.ErrNotExecutable) {
		t.Fatalf("err %v, want ErrNotExecutable", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	res, err := b.Build(ctx2, zipSource(base, zipOf(t, map[string]string{"handler.py": "x"})))
	if err != nil {
		t.Fatalf("the next build on the same runtime: %v", err)
	}
	res.Close()
}
