package build_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
)

// regFixture is a fixture on the registry sless runs (Distribution, token auth, on disk), which
// can be restarted on the same data.
type regFixture struct {
	*fixture
	root string
	keys *regauth.Keys
	srv  *registry.Server
	auth remote.Option // the platform's credential
}

func newRegFixture(t *testing.T) *regFixture {
	t.Helper()
	keys, err := regauth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	f := &regFixture{fixture: &fixture{}, root: t.TempDir(), keys: keys, auth: remote.WithAuth(keys.Platform().Authenticator())}
	f.restart(t)
	t.Cleanup(func() { f.srv.Close() })
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(mustRef(f.reg+"/sless/runtime-python3.11:latest"), img, f.auth); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	f.runtime = f.reg + "/sless/runtime-python3.11@" + d.String()
	if f.code, err = codestore.NewDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	b, err := oci.NewBuilder(oci.WithKeychain(keys.Platform().Keychain(f.reg)))
	if err != nil {
		t.Fatal(err)
	}
	if f.pipeline, err = build.New(f.code, b, build.WithRegistry(f.reg), build.WithRuntimes(map[string]string{"python3.11": f.runtime}),
		build.WithTempDir(t.TempDir())); err != nil {
		t.Fatal(err)
	}
	return f
}

// restart stops the registry, if it runs, and starts it on the same data with SweepAtStart. The
// address changes; the pipeline keeps the old one.
func (f *regFixture) restart(t *testing.T) registry.SweepStats {
	t.Helper()
	if f.srv != nil {
		if err := f.srv.Close(); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := registry.Start(context.Background(), registry.Config{RootDir: f.root, Auth: f.keys, SweepAtStart: true})
	if err != nil {
		t.Fatal(err)
	}
	f.srv, f.reg = srv, srv.Addr()
	return srv.Swept()
}

// head resolves ref on the registry with the platform's credential.
func (f *regFixture) head(ref string) (*v1.Descriptor, error) {
	return remote.Head(mustRef(ref), f.auth)
}

func (f *regFixture) tags(t *testing.T, repo string) []string {
	t.Helper()
	r, _ := name.NewRepository(repo)
	tags, err := remote.List(r, f.auth)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tags)
	return tags
}

// Three builds of one function leave three versions, each under its version tag. Collecting with
// the newest kept deletes the other two, keeps the newest under both its tags, and after a restart
// that sweeps, the deleted versions' own blobs are gone and the kept image pulls whole.
func TestCollectImages(t *testing.T) {
	ctx := context.Background()
	f := newRegFixture(t)
	var res []*build.Result
	var codeLayers []v1.Hash
	for _, body := range []string{"return 1", "return 2", "return 3"} {
		req := f.upload(t, map[string]string{"handler.py": "def handle(event):\n    " + body + "\n"})
		r, err := f.pipeline.Build(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
		img, err := remote.Image(mustRef(r.Image), f.auth)
		if err != nil {
			t.Fatal(err)
		}
		ls, _ := img.Layers()
		d, _ := ls[len(ls)-1].Digest()
		codeLayers = append(codeLayers, d)
	}
	repo := f.reg + "/sless-0123456789abcdef/hello"
	want := []string{"latest"}
	for _, r := range res {
		want = append(want, build.VersionTag(r.Key))
	}
	slices.Sort(want)
	if got := f.tags(t, repo); !slices.Equal(got, want) {
		t.Fatalf("tags after three builds = %v, want %v", got, want)
	}

	newest := res[2].Image
	if _, err := f.pipeline.CollectImages(ctx, "sless-0123456789abcdef", "hello", "not-a-digest"); err == nil {
		t.Error("a keep that is no image by digest was accepted")
	}
	deleted, err := f.pipeline.CollectImages(ctx, "sless-0123456789abcdef", "hello", newest)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	wantDeleted := []string{res[0].Image, res[1].Image}
	slices.Sort(wantDeleted)
	if !slices.Equal(deleted, wantDeleted) {
		t.Errorf("deleted %v, want %v", deleted, wantDeleted)
	}
	for _, r := range res[:2] {
		if _, err := f.head(r.Image); !oci.IsNotFound(err) {
			t.Errorf("collected image %s: %v, want 404", r.Image, err)
		}
	}
	for _, ref := range []string{newest, repo + ":latest", repo + ":" + build.VersionTag(res[2].Key)} {
		if d, err := f.head(ref); err != nil || !strings.HasSuffix(newest, "@"+d.Digest.String()) {
			t.Errorf("%s after collecting: %v, %v; want %s", ref, d, err, newest)
		}
	}
	if again, err := f.pipeline.CollectImages(ctx, "sless-0123456789abcdef", "hello", newest); len(again) != 0 || err != nil {
		t.Errorf("collecting again: %v, %v; want nothing", again, err)
	}
	if none, err := f.pipeline.CollectImages(ctx, "sless-0123456789abcdef", "no-such-function"); len(none) != 0 || err != nil {
		t.Errorf("collecting a repository that does not exist: %v, %v", none, err)
	}

	st := f.restart(t)
	if st.Blobs != 6 {
		t.Errorf("the sweep removed %+v, want the two versions' manifests, configs and code layers", st)
	}
	repo = f.reg + "/sless-0123456789abcdef/hello"
	for _, d := range codeLayers[:2] {
		l, err := remote.Layer(mustRef(repo+"@"+d.String()).(name.Digest), f.auth)
		if err == nil {
			_, err = l.Compressed()
		}
		if !oci.IsNotFound(err) {
			t.Errorf("code layer %s of a collected version: %v, want 404", d, err)
		}
	}
	img, err := remote.Image(mustRef(repo+"@"+strings.SplitN(newest, "@", 2)[1]), f.auth)
	if err == nil {
		err = validate.Image(img)
	}
	if err != nil {
		t.Errorf("the kept image after the sweep: %v", err)
	}
}

// Of two dependency layers, the one no function uses is deleted and its pin dropped (also the pin
// of one whose layer went before its pin could be dropped); the next install of its key records
// the new layer instead of failing with ErrMoved. Nothing else in the registry is touched.
func TestCollectDeps(t *testing.T) {
	ctx := context.Background()
	f := newRegFixture(t)
	store, err := deps.NewRegistryStore(f.reg+"/sless/deps", f.auth)
	if err != nil {
		t.Fatal(err)
	}
	layer := func(content string) v1.Layer {
		l, err := layers.FromFS(fstest.MapFS{"six.py": {Data: []byte(content)}}, layers.WithPrefix("/app/deps"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	used, unused, crashed := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	pins := &deps.MemPins{}
	for _, k := range []string{used, unused, crashed} {
		stored, err := store.Put(ctx, k, layer("x = '"+k+"'\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := deps.Pinned(ctx, pins, k, stored, "/app/deps"); err != nil {
			t.Fatal(err)
		}
	}
	usedPin, _ := pins.Pin(ctx, used)
	// The layer went, the pin stayed: what a crash between the two steps leaves.
	d, _ := f.head(deps.LayerRef(f.reg+"/sless/deps", crashed))
	if err := remote.Delete(mustRef(f.reg+"/sless/deps/"+crashed+"@"+d.Digest.String()), f.auth); err != nil {
		t.Fatal(err)
	}
	// Reinstalled without collecting, a key's new layer is refused.
	reinstalled := layer("x = 'reinstalled'\n")
	if _, err := deps.Pinned(ctx, pins, unused, reinstalled, "/app/deps"); !errors.Is(err, deps.ErrMoved) {
		t.Fatalf("a new layer for a pinned key: %v, want ErrMoved", err)
	}

	var asked []string
	inUse := func(k string) bool { asked = append(asked, k); return k == used }
	deleted, err := f.pipeline.CollectDeps(ctx, inUse, pins)
	if err != nil || !slices.Equal(deleted, []string{unused}) {
		t.Errorf("CollectDeps = %v, %v; want %s", deleted, err, unused)
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []string{used, unused, crashed}) {
		t.Errorf("inUse was asked about %v, want the three deps keys only", asked)
	}
	if _, err := store.Get(ctx, unused); !errors.Is(err, deps.ErrNotFound) {
		t.Errorf("the unused layer: %v, want ErrNotFound", err)
	}
	for k, want := range map[string]string{used: usedPin, unused: "", crashed: ""} {
		if got, _ := pins.Pin(ctx, k); got != want {
			t.Errorf("pin of %s = %q, want %q", k[:1], got, want)
		}
	}
	if _, err := store.Get(ctx, used); err != nil {
		t.Errorf("the used layer: %v", err)
	}
	if _, err := f.head(f.runtime); err != nil {
		t.Errorf("the runtime image: %v", err)
	}
	if again, err := f.pipeline.CollectDeps(ctx, inUse, pins); len(again) != 0 || err != nil {
		t.Errorf("collecting again: %v, %v; want nothing", again, err)
	}

	// The next install of the collected key: its layer is recorded, not refused.
	stored, err := store.Put(ctx, unused, reinstalled)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deps.Pinned(ctx, pins, unused, stored, "/app/deps"); err != nil {
		t.Fatalf("the reinstalled layer of a collected key: %v", err)
	}
	rd, _ := reinstalled.Digest()
	if got, _ := pins.Pin(ctx, unused); got != rd.String() {
		t.Errorf("pin after reinstalling = %s, want %s", got, rd)
	}
}
