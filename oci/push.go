package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Push uploads what the registry lacks and returns the image by digest. to is a repository, with an
// optional tag ("registry/repo:tag"); without a tag the image is pushed by digest only.
//
// Pushes go through one long-lived remote.Pusher: it cross-repository mounts the runtime's layers
// and remembers per repository which blobs it wrote, so a code-only rebuild uploads one layer, the
// config and the manifest. (A hand-written "known blobs" fast path that skipped the existence
// checks was measured against it and removed: on a registry on disk it was slower, see
// BENCHMARKS.md.)
func (b *Builder) Push(ctx context.Context, r *Result, to string) (name.Digest, error) {
	repo, ref, err := b.target(to)
	if err != nil {
		return name.Digest{}, err
	}
	d, err := r.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	dref := repo.Digest(d.String())
	if ref == nil {
		ref = dref
	}
	b.report("push", "pushing %s", ref)
	ps := &pushState{b: b}
	pctx := withPushState(ctx, ps)
	if err = b.pusher.Push(pctx, ref, r.taggable()); err != nil && ctx.Err() == nil {
		// What the Pusher remembers about repo may be wrong (a blob was deleted or
		// garbage-collected since it wrote it): check everything with a fresh one.
		var p *remote.Pusher
		if p, err = remote.NewPusher(b.ropts...); err == nil {
			err = p.Push(pctx, ref, r.taggable())
		}
	}
	if err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	b.report("push", "pushed %s (%d bytes uploaded)", dref, ps.sent.Load())
	return dref, nil
}

// target parses "repo[:tag]"; a reference with a digest is refused (the digest is the build's).
func (b *Builder) target(to string) (name.Repository, name.Reference, error) {
	if strings.Contains(to, "@") {
		return name.Repository{}, nil, fmt.Errorf("%w: push target %q must be a repository with an optional tag, not a digest", ErrInvalidSource, to)
	}
	opts := append(b.nameOpts(), name.StrictValidation)
	if tag, err := name.NewTag(to, opts...); err == nil {
		return tag.Context(), tag, nil
	}
	repo, err := name.NewRepository(to, b.nameOpts()...)
	if err != nil {
		return name.Repository{}, nil, fmt.Errorf("%w: push target %q: %v", ErrInvalidSource, to, err)
	}
	return repo, nil, nil
}

type pushStateKey struct{}

type pushState struct {
	b    *Builder
	sent atomic.Int64
}

func withPushState(ctx context.Context, ps *pushState) context.Context {
	return context.WithValue(ctx, pushStateKey{}, ps)
}

// progressTransport counts blob bytes sent for the push whose context carries a pushState.
type progressTransport struct{ next http.RoundTripper }

func (t *progressTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ps, _ := req.Context().Value(pushStateKey{}).(*pushState)
	if ps != nil && ps.b.o.progress != nil && req.Body != nil && strings.Contains(req.URL.Path, "/blobs/uploads/") {
		req = req.Clone(req.Context())
		req.Body = &countingBody{ReadCloser: req.Body, ps: ps}
	}
	return t.next.RoundTrip(req)
}

type countingBody struct {
	io.ReadCloser
	ps *pushState
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		sent := c.ps.sent.Add(int64(n))
		c.ps.b.o.progress(Progress{Stage: "push", Message: "uploading", Sent: sent})
	}
	return n, err
}

// Delete removes the manifest ref ("repo@sha256:…") from its registry with the Builder's
// credentials and transport. A manifest that is already gone is not an error.
func (b *Builder) Delete(ctx context.Context, ref string) error {
	d, err := name.NewDigest(ref, b.nameOpts()...)
	if err != nil {
		return fmt.Errorf("%w: %q is not a reference by digest: %v", ErrInvalidSource, ref, err)
	}
	if err := remote.Delete(d, append(b.ropts, remote.WithContext(ctx))...); err != nil && !IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// Tag points tag at the manifest ref ("repo@sha256:…") in ref's repository, with the Builder's
// credentials and transport: a GET of the manifest by digest and one PUT.
func (b *Builder) Tag(ctx context.Context, ref, tag string) error {
	d, err := name.NewDigest(ref, b.nameOpts()...)
	if err != nil {
		return fmt.Errorf("%w: %q is not a reference by digest: %v", ErrInvalidSource, ref, err)
	}
	t, err := name.NewTag(d.Context().String()+":"+tag, append(b.nameOpts(), name.StrictValidation)...)
	if err != nil {
		return fmt.Errorf("%w: tag %q: %v", ErrInvalidSource, tag, err)
	}
	opts := append(b.ropts, remote.WithContext(ctx))
	desc, err := remote.Get(d, opts...)
	if err == nil {
		err = remote.Tag(t, desc, opts...)
	}
	if err != nil {
		return fmt.Errorf("tagging %s as %s: %w", ref, tag, err)
	}
	return nil
}

// ListTags lists the tags of repo ("registry/repo"), every page. A repository that does not exist
// has none.
func (b *Builder) ListTags(ctx context.Context, repo string) ([]string, error) {
	r, err := name.NewRepository(repo, b.nameOpts()...)
	if err != nil {
		return nil, fmt.Errorf("%w: repository %q: %v", ErrInvalidSource, repo, err)
	}
	tags, err := remote.List(r, append(b.ropts, remote.WithContext(ctx), remote.WithPageSize(pageSize))...)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the tags of %s: %w", repo, err)
	}
	return tags, nil
}

// Digest resolves ref (a tag or a digest) to its manifest's digest ("sha256:…"). A manifest that
// does not exist satisfies IsNotFound.
func (b *Builder) Digest(ctx context.Context, ref string) (string, error) {
	r, err := name.ParseReference(ref, b.nameOpts()...)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidSource, ref, err)
	}
	desc, err := remote.Head(r, append(b.ropts, remote.WithContext(ctx))...)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", ref, err)
	}
	return desc.Digest.String(), nil
}

// Catalog lists the repositories of registry ("host[:port]"), following the registry's pages.
// Distribution answers only a credential allowed the catalog (regauth's platform one).
func (b *Builder) Catalog(ctx context.Context, registry string) ([]string, error) {
	reg, err := name.NewRegistry(registry, b.nameOpts()...)
	if err != nil {
		return nil, fmt.Errorf("%w: registry %q: %v", ErrInvalidSource, registry, err)
	}
	repos, err := remote.Catalog(ctx, reg, append(b.ropts, remote.WithContext(ctx), remote.WithPageSize(pageSize))...)
	if err != nil {
		return nil, fmt.Errorf("listing the repositories of %s: %w", registry, err)
	}
	return repos, nil
}

// pageSize is how many tags or repositories one listing request asks for: Distribution's default
// page (a registry refuses more than its configured maximum, 1000 by default).
const pageSize = 100

// IsNotFound reports whether a registry answered that a manifest or blob does not exist (404, or
// the distribution error codes that say so).
func IsNotFound(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	if terr.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range terr.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.BlobUnknownErrorCode, transport.NameUnknownErrorCode:
			return true
		}
	}
	return false
}
