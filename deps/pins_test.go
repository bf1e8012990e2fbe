package deps_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sless-dev/sless/deps"
)

// tarLayer is a layer with exactly the given entries (name → symlink target, "" for a file, "/"
// suffix for a directory), in order.
func tarLayer(t *testing.T, entries ...[2]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg}
		switch {
		case e[1] != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e[1]
		case e[0][len(e[0])-1] == '/':
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCheckLayer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries [][2]string
		ok      bool
	}{
		{"packages under the dir", [][2]string{{"app/", ""}, {"app/deps/", ""}, {"app/deps/six.py", ""}, {"app/deps/bin/x", "../six.py"}}, true},
		{"leading slash and dot", [][2]string{{"/app/deps/a.py", ""}, {"./app/deps/b.py", ""}}, true},
		{"the runtime's server replaced", [][2]string{{"app/deps/six.py", ""}, {"app/server.py", ""}}, false},
		{"the code replaced", [][2]string{{"app/function/handler.py", ""}}, false},
		{"a parent as a file", [][2]string{{"app", ""}}, false},
		{"dot-dot", [][2]string{{"app/deps/../server.py", ""}}, false},
		{"elsewhere", [][2]string{{"etc/passwd", ""}}, false},
		{"through a symlink of the same layer", [][2]string{{"app/deps/evil", "/app"}, {"app/deps/evil/server.py", ""}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := deps.CheckLayer(tarLayer(t, tc.entries...), "/app/deps")
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, deps.ErrEscapes)) {
				t.Errorf("CheckLayer = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// A key's layer is recorded the first time it is stored; a store whose tag was moved to another
// layer afterwards is refused, and so is a first layer that reaches outside its directory.
func TestCachePinsLayers(t *testing.T) {
	ctx := context.Background()
	store, pins := &deps.MemStore{}, &deps.MemPins{}
	r := &fakeResolver{}
	c := deps.NewCache(store, r, pins, t.TempDir())
	spec := pySpec("tinypkg==1.0\n", "sless-a")
	key, _ := deps.Key(spec)
	first, err := c.Layer(ctx, spec, "/app/deps")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := first.Layer.Digest()
	if p, _ := pins.Pin(ctx, key); p != d.String() {
		t.Fatalf("pin %q after the install, want %s", p, d)
	}
	if again, err := deps.NewCache(store, r, pins, t.TempDir()).Layer(ctx, spec, "/app/deps"); err != nil || !again.Cached {
		t.Fatalf("the recorded layer: %+v %v", again, err)
	}
	// Someone with write access to the store moves the tag.
	store.Put(ctx, key, tarLayer(t, [2]string{"app/deps/tinypkg/__init__.py", ""}, [2]string{"app/server.py", ""}))
	if _, err := deps.NewCache(store, r, pins, t.TempDir()).Layer(ctx, spec, "/app/deps"); !errors.Is(err, deps.ErrMoved) {
		t.Errorf("a moved tag: %v, want ErrMoved", err)
	}
	// Without a record (a layer pushed by something else before sless saw the key), the first
	// use checks what the layer holds.
	fresh := &deps.MemPins{}
	if _, err := deps.NewCache(store, r, fresh, t.TempDir()).Layer(ctx, spec, "/app/deps"); !errors.Is(err, deps.ErrEscapes) {
		t.Errorf("an escaping layer seen first: %v, want ErrEscapes", err)
	}
	if p, _ := fresh.Pin(ctx, key); p != "" {
		t.Errorf("a refused layer was recorded: %s", p)
	}
	if r.runs.Load() != 1 {
		t.Errorf("%d installs, want 1", r.runs.Load())
	}
}
