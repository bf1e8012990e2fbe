package build

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/oci"
)

// depsRepo is where both backends store dependency layers below the registry
// (deps.NewRegistryStore(<registry>/sless/deps), one repository per key).
const depsRepo = "sless/deps"

// VersionTag is the tag a build's image gets besides :latest: "v-" and the first 12 hex digits of
// its Key. Distribution lists no untagged manifests, so every version stays findable by it for
// CollectImages after :latest moved on.
func VersionTag(key string) string { return "v-" + short(key) }

// CollectImages deletes, by digest, every manifest in the repository of function fn in namespace
// ns that a tag names and keep does not: keep are images by digest (Result.Image), compared by
// digest only. A digest in keep is never deleted, however many tags name it; deleting a manifest
// drops its tags. A repository that does not exist holds nothing to collect. deleted are the
// images deleted ("repo@sha256:…"); on errors the others are still tried.
//
// The caller runs it when no build of the function can push meanwhile: a build's new image is in
// no keep list until the build returns, and would be deleted. The blobs stay until the registry
// sweeps them (registry.Sweep).
func (p *Pipeline) CollectImages(ctx context.Context, ns, fn string, keep ...string) (deleted []string, err error) {
	digests := map[string]bool{}
	for _, k := range keep {
		d, err := name.NewDigest(k)
		if err != nil {
			return nil, fmt.Errorf("build: collecting images of %s/%s: keep %q is not an image by digest: %v", ns, fn, k, err)
		}
		digests[d.DigestStr()] = true
	}
	return p.collect(ctx, p.o.registry+"/"+ns+"/"+fn, digests)
}

// collect deletes the manifests of repo's tags whose digests keep lacks.
func (p *Pipeline) collect(ctx context.Context, repo string, keep map[string]bool) (deleted []string, err error) {
	tags, err := p.builder.ListTags(ctx, repo)
	if err != nil {
		return nil, err
	}
	var errs []error
	done := map[string]bool{}
	for _, tag := range tags {
		d, err := p.builder.Digest(ctx, repo+":"+tag)
		if oci.IsNotFound(err) {
			continue // untagged since the listing
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if keep[d] || done[d] {
			continue
		}
		done[d] = true
		ref := repo + "@" + d
		if err := p.builder.Delete(ctx, ref); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, ref)
	}
	return deleted, errors.Join(errs...)
}

// CollectDeps deletes the dependency layers whose keys inUse reports false: for each repository
// <registry>/sless/deps/<key> in the registry's catalog (which the platform's credential may
// read), its manifests by digest, then the key's pin, in the same step, so that the next build of
// the key installs again and records the new layer instead of failing with deps.ErrMoved. A pin is
// dropped only once the layer is gone (also when an earlier call deleted it but failed to drop the
// pin); while a manifest could not be deleted it stays. deleted are the keys whose layers this
// call deleted; on errors the others are still tried.
//
// inUse must report true for every key a function's image or a build in progress or pending may
// still mount: its layer is deleted from the store otherwise. The blobs stay until the registry
// sweeps them (registry.Sweep), and only those no remaining image references.
func (p *Pipeline) CollectDeps(ctx context.Context, inUse func(key string) bool, pins deps.Pins) (deleted []string, err error) {
	repos, err := p.builder.Catalog(ctx, p.o.registry)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, r := range repos {
		key, ok := strings.CutPrefix(r, depsRepo+"/")
		if !ok || key == "" || strings.Contains(key, "/") || inUse(key) {
			continue
		}
		gone, err := p.collect(ctx, p.o.registry+"/"+r, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("collecting dependency layer %s: %w", short(key), err))
			continue
		}
		if len(gone) == 0 {
			// Collected before: the repository outlives its manifests. Drop a pin left behind
			// only, not write for every such key on every call.
			pin, err := pins.Pin(ctx, key)
			if err != nil {
				errs = append(errs, fmt.Errorf("reading the pin of dependency layer %s: %w", short(key), err))
				continue
			}
			if pin == "" {
				continue
			}
		}
		if err := pins.DropPin(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("dropping the pin of dependency layer %s: %w", short(key), err))
			continue
		}
		if len(gone) > 0 {
			deleted = append(deleted, key)
		}
	}
	return deleted, errors.Join(errs...)
}
