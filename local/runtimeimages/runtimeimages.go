package runtimeimages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// ErrBaseMissing says a language base's layout is not in the bases directory.
var ErrBaseMissing = errors.New("base image layout missing")

// BaseDir is where runtime rt's base layout is expected under basesDir.
func BaseDir(basesDir, rt string) string { return filepath.Join(basesDir, rt) }

// Missing lists the runtimes whose base layout is not under basesDir.
func Missing(basesDir string) []string {
	var out []string
	for _, rt := range runtimes.Names() {
		if _, err := os.Stat(filepath.Join(BaseDir(basesDir, rt), "index.json")); err != nil {
			out = append(out, rt)
		}
	}
	return out
}

// Install pushes every runtime's base into registry (as sless/base-<runtime>, only when its digest
// changed) and builds and pushes the runtime image (sless/runtime-<runtime>). It returns each
// runtime's image by digest. progress, when set, hears what takes time; ropts (the registry's
// credentials) are for pushing the bases.
func Install(ctx context.Context, b *oci.Builder, registry, basesDir string, progress func(format string, args ...any), ropts ...remote.Option) (map[string]string, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	// A few at once: the bases are hundreds of MB together, and a fresh data dir pushes them all.
	out := map[string]string{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(3)
	for _, rtName := range runtimes.Names() {
		g.Go(func() error {
			ref, err := install(gctx, b, registry, basesDir, rtName, progress, ropts...)
			if err != nil {
				return err
			}
			mu.Lock()
			out[rtName] = ref
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Base is runtime rt's base image from its layout under basesDir, and its digest.
func Base(basesDir, rt string) (v1.Image, v1.Hash, error) {
	dir := BaseDir(basesDir, rt)
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, v1.Hash{}, fmt.Errorf("%w: the %s base is not in %s; build it with hack/build-bases.sh %s", ErrBaseMissing, rt, basesDir, rt)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("reading base %s: %w", dir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		return nil, v1.Hash{}, fmt.Errorf("base layout %s holds no image (%v)", dir, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	return img, im.Manifests[0].Digest, err
}

// install pushes runtime rtName's base (when its digest changed) and its runtime image.
func install(ctx context.Context, b *oci.Builder, registry, basesDir, rtName string, progress func(format string, args ...any), ropts ...remote.Option) (string, error) {
	rt, _ := runtimes.Lookup(rtName)
	img, digest, err := Base(basesDir, rtName)
	if err != nil {
		return "", err
	}
	baseRef, err := name.ParseReference(registry + "/sless/base-" + rtName + ":latest")
	if err != nil {
		return "", err
	}
	if desc, err := remote.Head(baseRef, append(ropts, remote.WithContext(ctx))...); err != nil || desc.Digest != digest {
		progress("installing the %s base image into the registry", rtName)
		if err := remote.Write(baseRef, img, append(ropts, remote.WithContext(ctx))...); err != nil {
			return "", fmt.Errorf("pushing the %s base: %w", rtName, err)
		}
	}
	res, err := b.BuildRuntime(ctx, oci.RuntimeSource{Base: baseRef.String(), Name: rt.Name, Files: rt.Files(), Dir: "/app", Cmd: rt.Cmd, Env: rt.Env})
	if err != nil {
		return "", fmt.Errorf("building the %s runtime image: %w", rtName, err)
	}
	ref, err := b.Push(ctx, res, registry+"/sless/runtime-"+rtName+":latest")
	res.Close()
	if err != nil {
		return "", fmt.Errorf("pushing the %s runtime image: %w", rtName, err)
	}
	progress("runtime %s: %s", rtName, ref)
	return ref.String(), nil
}
