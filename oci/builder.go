package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/layers"
)

// Image config and label contract (DESIGN.md §3).
const (
	FunctionUser = "65532:65532"
	FunctionDir  = "/app/function"

	LabelBaseName   = "org.opencontainers.image.base.name"
	LabelBaseDigest = "org.opencontainers.image.base.digest"
	LabelCreated    = "org.opencontainers.image.created"
	LabelRevision   = "org.opencontainers.image.revision"
	LabelFunction   = "dev.sless.function"
	LabelNamespace  = "dev.sless.namespace"
	LabelRuntime    = "dev.sless.runtime"

	historyCode = "sless: code"
)

// ErrInvalidSource marks a Source that cannot be built as given (bad handler, no code, both kinds of
// code). Layer rule violations come back as the layers package's errors.
var ErrInvalidSource = errors.New("invalid source")

// Source is what one function build needs.
type Source struct {
	// RuntimeImage is the image to build on, by tag or digest. An index gives an index.
	RuntimeImage string
	// Zip is the uploaded archive, ZipSize bytes long. Exactly one of Zip and Dir is set.
	Zip     io.ReaderAt
	ZipSize int64
	// ZipSHA256 is the hex sha256 of the archive if the caller already knows it; else it is computed.
	ZipSHA256 string
	// Dir is a directory tree of code.
	Dir fs.FS
	// Handler becomes HANDLER (python "module.function", node "file.export"; a provided bootstrap
	// may read it or not).
	Handler string
	// Executable, when set, is a file the code must hold at its root with an execute bit (a
	// provided function's bootstrap): layers.ErrNotExecutable otherwise.
	Executable string
	// Function, Namespace and Runtime become dev.sless.* labels when set.
	Function, Namespace, Runtime string
	// Deps is the cached dependency layer (deps.Cache), placed between the runtime and the code;
	// DepsKey names it in the image history. Optional.
	Deps    v1.Layer
	DepsKey string
}

// Result is a built, not yet pushed, function image.
type Result struct {
	// Image is set when the runtime image is a single image; Index when it is an index.
	Image v1.Image
	Index v1.ImageIndex
	// Base is the runtime image by digest.
	Base name.Digest
	// Revision is the zip's sha256 ("sha256:…"), or the code layer's diffID for a directory.
	Revision string
	// Code is the code layer appended to every platform.
	Code *layers.Layer
}

// Digest of the image or index manifest.
func (r *Result) Digest() (v1.Hash, error) {
	if r.Index != nil {
		return r.Index.Digest()
	}
	return r.Image.Digest()
}

func (r *Result) taggable() remote.Taggable {
	if r.Index != nil {
		return r.Index
	}
	return r.Image
}

// Close releases the code layer's temporary file. Push before closing.
func (r *Result) Close() error { return r.Code.Close() }

// Builder builds function images. It is safe for concurrent use and meant to live as long as the
// process: it caches resolved runtime images and keeps one remote.Pusher.
type Builder struct {
	o      *options
	ropts  []remote.Option
	pusher *remote.Pusher
	flight singleflight.Group

	mu    sync.Mutex
	tags  map[string]resolvedTag // runtime reference as given -> digest
	bases map[string]*base       // digest reference -> base
}

type resolvedTag struct {
	digest string
	at     time.Time
}

type base struct {
	ref name.Digest
	img v1.Image
	idx v1.ImageIndex
}

// NewBuilder makes a Builder.
func NewBuilder(opts ...Option) (*Builder, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, err
	}
	b := &Builder{o: o, tags: map[string]resolvedTag{}, bases: map[string]*base{}}
	b.ropts = []remote.Option{
		remote.WithTransport(&progressTransport{next: o.transport}),
		remote.WithAuthFromKeychain(o.keychain),
		remote.WithJobs(o.jobs),
	}
	if b.pusher, err = remote.NewPusher(b.ropts...); err != nil {
		return nil, fmt.Errorf("making pusher: %w", err)
	}
	return b, nil
}

func (b *Builder) nameOpts() []name.Option {
	if b.o.insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

func (b *Builder) report(stage, format string, args ...any) {
	if b.o.progress != nil {
		b.o.progress(Progress{Stage: stage, Message: fmt.Sprintf(format, args...)})
	}
}

// Build makes the function image: the runtime image plus one code layer, with the config of
// DESIGN.md §3. The runtime's layers are never downloaded.
func (b *Builder) Build(ctx context.Context, src Source) (*Result, error) {
	if (src.Zip == nil) == (src.Dir == nil) {
		return nil, fmt.Errorf("%w: give exactly one of a zip archive or a directory", ErrInvalidSource)
	}
	if err := apiv1.ValidEntrypoint(src.Handler); err != nil {
		return nil, fmt.Errorf("%w: handler %q must look like module.function (python) or file.export (node)", ErrInvalidSource, src.Handler)
	}
	bs, err := b.resolve(ctx, src.RuntimeImage)
	if err != nil {
		return nil, err
	}
	layerMT := bs.layerMediaType()
	lopts := append([]layers.Option{layers.WithModTime(b.o.modTime), layers.WithMediaType(layerMT)}, b.o.layerOpts...)
	if src.Executable != "" {
		lopts = append(lopts, layers.WithExecutable(src.Executable))
	}

	b.report("layer", "layering code")
	var code *layers.Layer
	revision := ""
	if src.Zip != nil {
		revision = src.ZipSHA256
		if revision == "" {
			if revision, err = sha256Of(src.Zip, src.ZipSize); err != nil {
				return nil, fmt.Errorf("hashing archive: %w", err)
			}
		}
		revision = "sha256:" + strings.TrimPrefix(revision, "sha256:")
		code, err = layers.FromZip(src.Zip, src.ZipSize, lopts...)
	} else {
		code, err = layers.FromFS(src.Dir, lopts...)
	}
	if err != nil {
		return nil, err
	}
	if revision == "" {
		diffID, _ := code.DiffID()
		revision = diffID.String()
	}
	b.report("layer", "code layer %s: %d files, %d bytes compressed", short(code), code.Files(), mustSize(code))

	res := &Result{Base: bs.ref, Revision: revision, Code: code}
	meta := imageMeta{src: src, base: bs.ref, revision: revision, modTime: b.o.modTime, baseName: src.RuntimeImage}
	var adds []mutate.Addendum
	if src.Deps != nil {
		if bs.idx != nil {
			code.Close()
			return nil, fmt.Errorf("%w: dependency layers are per platform; runtime %s is an index", ErrInvalidSource, src.RuntimeImage)
		}
		dmt, _ := src.Deps.MediaType()
		adds = append(adds, mutate.Addendum{Layer: src.Deps, MediaType: dmt,
			History: v1.History{Created: v1.Time{Time: b.o.modTime}, CreatedBy: "sless: deps " + src.DepsKey}})
	}
	lmt, _ := code.MediaType()
	adds = append(adds, mutate.Addendum{Layer: code, MediaType: lmt,
		History: v1.History{Created: v1.Time{Time: b.o.modTime}, CreatedBy: historyCode, Comment: revision}})
	res.Image, res.Index, err = appendToAll(bs.img, bs.idx, adds, codeEdit(meta), meta.labels)
	if err != nil {
		code.Close()
		return nil, err
	}
	return res, nil
}

// layerMediaType is the media type a layer added to this base must have: Docker schema 2 images
// take Docker layers, OCI images OCI layers.
func (bs *base) layerMediaType() types.MediaType {
	if mt := bs.mediaType(); mt == types.DockerManifestSchema2 || mt == types.DockerManifestList {
		return types.DockerLayer
	}
	return types.OCILayer
}

func (bs *base) mediaType() types.MediaType {
	var mt types.MediaType
	if bs.img != nil {
		mt, _ = bs.img.MediaType()
	} else {
		mt, _ = bs.idx.MediaType()
	}
	return mt
}

// resolve returns the runtime image, fetching its manifest (and later its config) only the first
// time a digest is seen.
func (b *Builder) resolve(ctx context.Context, runtimeRef string) (*base, error) {
	ref, err := name.ParseReference(runtimeRef, b.nameOpts()...)
	if err != nil {
		return nil, fmt.Errorf("%w: runtime image %q: %v", ErrInvalidSource, runtimeRef, err)
	}
	key := ref.String()
	b.mu.Lock()
	if d, ok := ref.(name.Digest); ok {
		key = d.String()
	} else if t, ok := b.tags[key]; ok && (b.o.baseTTL == 0 || time.Since(t.at) < b.o.baseTTL) {
		key = t.digest
	}
	if bs, ok := b.bases[key]; ok {
		b.mu.Unlock()
		return bs, nil
	}
	b.mu.Unlock()

	v, err, _ := b.flight.Do(key, func() (any, error) {
		b.report("resolve", "resolving runtime image %s", ref)
		desc, err := remote.Get(ref, append(b.ropts, remote.WithContext(ctx))...)
		if err != nil {
			return nil, fmt.Errorf("resolving runtime image %s: %w", ref, err)
		}
		bs := &base{ref: ref.Context().Digest(desc.Digest.String())}
		switch {
		case desc.MediaType.IsIndex():
			bs.idx, err = desc.ImageIndex()
		case desc.MediaType.IsImage():
			bs.img, err = desc.Image()
		default:
			err = fmt.Errorf("%w: runtime image %s has media type %s, not an image or index", ErrInvalidSource, ref, desc.MediaType)
		}
		if err != nil {
			return nil, err
		}
		// The descriptor keeps this build's ctx for what it fetches later: read the manifest and
		// config now, which remote caches, so that a build that fails after resolving (code
		// refused by layers) leaves no base behind that only answers "context canceled". An
		// index's children are still fetched per build.
		if bs.img != nil {
			if _, err := bs.img.Manifest(); err != nil {
				return nil, fmt.Errorf("reading runtime image %s: %w", ref, err)
			}
			if _, err := bs.img.ConfigFile(); err != nil {
				return nil, fmt.Errorf("reading runtime image %s config: %w", ref, err)
			}
		} else if _, err := bs.idx.IndexManifest(); err != nil {
			return nil, fmt.Errorf("reading runtime index %s: %w", ref, err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, isDigest := ref.(name.Digest); !isDigest {
			b.tags[ref.String()] = resolvedTag{digest: bs.ref.String(), at: time.Now()}
		}
		if old, ok := b.bases[bs.ref.String()]; ok {
			return old, nil // keep the instance whose manifest and config are already cached
		}
		b.bases[bs.ref.String()] = bs
		b.report("resolve", "runtime image %s", bs.ref)
		return bs, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*base), nil
}

type imageMeta struct {
	src      Source
	base     name.Digest
	baseName string
	revision string
	modTime  time.Time
}

func (m imageMeta) labels(baseDigest v1.Hash) map[string]string {
	l := map[string]string{
		LabelBaseName:   m.baseName,
		LabelBaseDigest: baseDigest.String(),
		LabelCreated:    m.modTime.Format(time.RFC3339),
		LabelRevision:   m.revision,
	}
	for k, v := range map[string]string{LabelFunction: m.src.Function, LabelNamespace: m.src.Namespace, LabelRuntime: m.src.Runtime} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

// configEdit changes a copy of a platform image's config and returns the annotations to set on an
// OCI manifest. baseDigest is that platform image's digest.
type configEdit func(cf *v1.ConfigFile, baseDigest v1.Hash) map[string]string

// appendLayers adds layers to one platform image and applies edit to its config.
func appendLayers(img v1.Image, adds []mutate.Addendum, edit configEdit) (v1.Image, error) {
	baseDigest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	out, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("appending layer: %w", err)
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading base image config: %w", err)
	}
	cf = cf.DeepCopy()
	annotations := edit(cf, baseDigest)
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return nil, fmt.Errorf("setting config: %w", err)
	}
	// Docker schema 2 manifests have no annotations; OCI ones carry the base and revision too.
	if mt, _ := img.MediaType(); mt == types.OCIManifestSchema1 && len(annotations) > 0 {
		out = mutate.Annotations(out, annotations).(v1.Image)
	}
	return out, nil
}

// codeEdit is the function image config of DESIGN.md §3.
func codeEdit(m imageMeta) configEdit {
	return func(cf *v1.ConfigFile, baseDigest v1.Hash) map[string]string {
		cf.Created = v1.Time{Time: m.modTime}
		cf.Config.User = FunctionUser
		cf.Config.WorkingDir = FunctionDir
		cf.Config.Env = setEnv(cf.Config.Env, "HANDLER", m.src.Handler)
		if envValue(cf.Config.Env, "PORT") == "" {
			cf.Config.Env = setEnv(cf.Config.Env, "PORT", "8080")
		}
		labels := m.labels(baseDigest)
		setLabels(cf, labels)
		return labels
	}
}

func setLabels(cf *v1.ConfigFile, labels map[string]string) {
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	for k, v := range labels {
		cf.Config.Labels[k] = v
	}
}

// appendToAll appends the layers to img, or to every runnable platform image of idx. Entries that
// are not runnable images (attestations, unknown/unknown) are dropped: their subject would be stale.
func appendToAll(img v1.Image, idx v1.ImageIndex, adds []mutate.Addendum, edit configEdit, indexAnnotations func(v1.Hash) map[string]string) (v1.Image, v1.ImageIndex, error) {
	if img != nil {
		out, err := appendLayers(img, adds, edit)
		return out, nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("reading base index: %w", err)
	}
	imt, _ := idx.MediaType()
	out := mutate.IndexMediaType(empty.Index, imt)
	n := 0
	for _, desc := range im.Manifests {
		if !desc.MediaType.IsImage() || (desc.Platform != nil && desc.Platform.OS == "unknown") {
			continue
		}
		child, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("reading base image %s: %w", desc.Digest, err)
		}
		built, err := appendLayers(child, adds, edit)
		if err != nil {
			return nil, nil, err
		}
		out = mutate.AppendManifests(out, mutate.IndexAddendum{
			Add:        built,
			Descriptor: v1.Descriptor{MediaType: desc.MediaType, Platform: desc.Platform},
		})
		n++
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("%w: base index has no runnable images", ErrInvalidSource)
	}
	if imt == types.OCIImageIndex {
		d, err := idx.Digest()
		if err != nil {
			return nil, nil, err
		}
		out = mutate.Annotations(out, indexAnnotations(d)).(v1.ImageIndex)
	}
	return nil, out, nil
}

func setEnv(env []string, k, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

func envValue(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

func sha256Of(r io.ReaderAt, size int64) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func short(l *layers.Layer) string {
	d, _ := l.Digest()
	return d.String()[:19]
}

func mustSize(l *layers.Layer) int64 {
	s, _ := l.Size()
	return s
}
