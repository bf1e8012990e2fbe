package registry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
)

// blobPath is where the filesystem driver keeps a blob's bytes below RootDir.
func blobPath(root string, h v1.Hash) string {
	return filepath.Join(root, "docker/registry/v2/blobs", h.Algorithm, h.Hex[:2], h.Hex, "data")
}

// Two images share a base layer; one is deleted by digest through the API. A restart with
// SweepAtStart reclaims exactly that image's own blobs (manifest, config, unique layer), keeps the
// shared layer and the other image whole, and a second sweep finds nothing.
func TestSweepAtStart(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	keys, err := regauth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	start := func() *registry.Server {
		t.Helper()
		s, err := registry.Start(ctx, registry.Config{RootDir: root, Auth: keys, SweepAtStart: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	auth := remote.WithAuth(keys.Platform().Authenticator())

	shared, err := random.Layer(4096, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	image := func() (v1.Image, v1.Layer) {
		own, err := random.Layer(2048, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), shared, own)
		if err != nil {
			t.Fatal(err)
		}
		return img, own
	}
	kept, _ := image()
	gone, goneLayer := image()

	s := start()
	if st := s.Swept(); st != (registry.SweepStats{}) {
		t.Errorf("sweep of an empty registry: %+v", st)
	}
	reg := s.Addr()
	keptRef, _ := name.ParseReference(reg+"/sless-00000000000000aa/kept:latest", name.Insecure)
	goneRef, _ := name.ParseReference(reg+"/sless-00000000000000aa/gone:latest", name.Insecure)
	for ref, img := range map[name.Reference]v1.Image{keptRef: kept, goneRef: gone} {
		if err := remote.Write(ref, img, auth); err != nil {
			t.Fatal(err)
		}
	}
	goneDigest, _ := gone.Digest()
	if err := remote.Delete(goneRef.Context().Digest(goneDigest.String()), auth); err != nil {
		t.Fatal(err)
	}
	// Deleting the manifest leaves its blobs: only the sweep reclaims them.
	goneLayerDigest, _ := goneLayer.Digest()
	if _, err := os.Stat(blobPath(root, goneLayerDigest)); err != nil {
		t.Fatalf("the deleted image's layer is gone before the sweep: %v", err)
	}
	if err := notFound(goneRef.Context().Digest(goneLayerDigest.String()), auth); err == nil {
		t.Fatal("the deleted image's layer answers 404 before the sweep: the check below proves nothing")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = start()
	var want registry.SweepStats
	goneManifest, _ := gone.RawManifest()
	goneConfig, _ := gone.RawConfigFile()
	goneLayerSize, _ := goneLayer.Size()
	want.Blobs, want.Bytes = 3, int64(len(goneManifest)+len(goneConfig))+goneLayerSize
	want.Kept = 4 // the kept image's manifest, config and two layers
	if got := s.Swept(); got != want {
		t.Errorf("swept %+v, want %+v", got, want)
	}
	reg = s.Addr()
	keptRef, _ = name.ParseReference(reg+"/sless-00000000000000aa/kept:latest", name.Insecure)
	img, err := remote.Image(keptRef, auth)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("the kept image after the sweep: %v", err)
	}
	goneRepo, _ := name.NewRepository(reg+"/sless-00000000000000aa/gone", name.Insecure)
	if err := notFound(goneRepo.Digest(goneLayerDigest.String()), auth); err != nil {
		t.Errorf("the deleted image's own layer: %v", err)
	}
	if _, err := os.Stat(blobPath(root, goneLayerDigest)); !os.IsNotExist(err) {
		t.Errorf("the deleted image's own layer is still on disk: %v", err)
	}
	sharedDigest, _ := shared.Digest()
	if _, err := os.Stat(blobPath(root, sharedDigest)); err != nil {
		t.Errorf("the shared layer: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	if st, err := registry.Sweep(ctx, root); err != nil || st != (registry.SweepStats{Kept: 4}) {
		t.Errorf("second sweep: %+v, %v; want nothing removed, 4 kept", st, err)
	}
}

// notFound reports whether reading blob ref failed with 404.
func notFound(ref name.Digest, opts ...remote.Option) error {
	l, err := remote.Layer(ref, opts...)
	if err == nil {
		var rc io.ReadCloser
		if rc, err = l.Compressed(); err == nil {
			rc.Close()
		}
	}
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return nil
	}
	return fmt.Errorf("reading %s: %v, want 404", ref, err)
}

// A sweep that cannot read a manifest (its blob truncated by a crash) does not keep the registry
// from starting: it says why, and the intact images serve.
func TestSweepFailureStillServes(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := registry.Start(ctx, registry.Config{RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	var refs []name.Reference
	var imgs []v1.Image
	for _, repo := range []string{"intact", "broken"} {
		img, err := random.Image(1024, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(s.Addr()+"/sless-00000000000000ab/"+repo+":latest", name.Insecure)
		if err := remote.Write(ref, img); err != nil {
			t.Fatal(err)
		}
		refs, imgs = append(refs, ref), append(imgs, img)
	}
	s.Close()
	d, _ := imgs[1].Digest()
	if err := os.WriteFile(blobPath(root, d), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	s, err = registry.Start(ctx, registry.Config{RootDir: root, SweepAtStart: true, Log: &log, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("a failed sweep stopped the registry: %v", err)
	}
	defer s.Close()
	if s.Swept().Err == nil || !strings.Contains(log.String(), "sweep at start failed") {
		t.Errorf("the failed sweep was not reported: %+v %q", s.Swept(), log.String())
	}
	ref, _ := name.ParseReference(s.Addr()+"/sless-00000000000000ab/intact:latest", name.Insecure)
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("the intact image after a failed sweep: %v", err)
	}
}
