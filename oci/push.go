package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sync/errgroup"
)

// Push uploads what the registry lacks and returns the image by digest. to is a repository, with an
// optional tag ("registry/repo:tag"); without a tag the image is pushed by digest only.
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
	fast, err := b.pushKnown(pctx, repo, ref, r)
	switch {
	case !fast:
		err = b.pusher.Push(pctx, ref, r.taggable())
	case err != nil:
		// What this Builder knew about repo was wrong (a blob was deleted or garbage-collected).
		// The long-lived Pusher remembers the same blobs, so check everything with a fresh one.
		b.forget(repo)
		var p *remote.Pusher
		if p, err = remote.NewPusher(b.ropts...); err == nil {
			err = p.Push(pctx, ref, r.taggable())
		}
	}
	if err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	b.remember(repo, r)
	b.report("push", "pushed %s (%d bytes uploaded)", dref, ps.sent.Load())
	return dref, nil
}

// blobs lists the layer and config digests of a single-platform result.
func blobs(r *Result) ([]v1.Hash, error) {
	if r.Image == nil {
		return nil, errors.New("not a single image")
	}
	m, err := r.Image.Manifest()
	if err != nil {
		return nil, err
	}
	out := []v1.Hash{m.Config.Digest}
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out, nil
}

// remember records which blobs a repository holds after a successful push.
func (b *Builder) remember(repo name.Repository, r *Result) {
	hs, err := blobs(r)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.known[repo.String()]
	if set == nil {
		set = map[v1.Hash]bool{}
		b.known[repo.String()] = set
	}
	for _, h := range hs {
		set[h] = true
	}
}

func (b *Builder) forget(repo name.Repository) {
	b.mu.Lock()
	delete(b.known, repo.String())
	b.mu.Unlock()
}

// pushKnown is the code-only fast path. When this Builder has pushed to repo before and every blob
// of the image except its new code layer and config is known to be there, it uploads just those two
// (POST + PUT each, concurrently: no existence HEADs, no PATCH) and PUTs the manifest, which is all a
// registry needs. It reports false when the conditions do not hold; on any error the caller falls
// back to the Pusher's full, checking path (the registry may have lost blobs to garbage collection).
func (b *Builder) pushKnown(ctx context.Context, repo name.Repository, ref name.Reference, r *Result) (bool, error) {
	hs, err := blobs(r)
	if err != nil {
		return false, nil
	}
	code, _ := r.Code.Digest()
	b.mu.Lock()
	set := b.known[repo.String()]
	var missing []v1.Hash
	ok := set != nil
	for i, h := range hs {
		if set[h] {
			continue
		}
		if i == 0 || h == code { // the config or our own code layer: we hold the bytes
			missing = append(missing, h)
			continue
		}
		ok = false
	}
	b.mu.Unlock()
	if !ok {
		return false, nil
	}
	client, err := b.client(ctx, repo)
	if err != nil {
		return true, err
	}
	var g errgroup.Group
	for _, h := range missing {
		h := h
		g.Go(func() error {
			if h == code {
				rc, err := r.Code.Compressed()
				if err != nil {
					return err
				}
				defer rc.Close()
				size, _ := r.Code.Size()
				return uploadMonolithic(ctx, client, repo, h, rc, size)
			}
			cfg, err := r.Image.RawConfigFile()
			if err != nil {
				return err
			}
			return uploadMonolithic(ctx, client, repo, h, bytes.NewReader(cfg), int64(len(cfg)))
		})
	}
	if err := g.Wait(); err != nil {
		return true, err
	}
	return true, b.pusher.Put(ctx, ref, r.Image)
}

// client returns an authenticated HTTP client for pushing to repo, made once per repository.
func (b *Builder) client(ctx context.Context, repo name.Repository) (*http.Client, error) {
	b.mu.Lock()
	c := b.clients[repo.String()]
	b.mu.Unlock()
	if c != nil {
		return c, nil
	}
	auth, err := authn.Resolve(ctx, b.o.keychain, repo)
	if err != nil {
		return nil, err
	}
	t, err := transport.NewWithContext(ctx, repo.Registry, auth, &progressTransport{next: b.o.transport},
		[]string{repo.Scope(transport.PushScope)})
	if err != nil {
		return nil, err
	}
	c = &http.Client{Transport: t}
	b.mu.Lock()
	b.clients[repo.String()] = c
	b.mu.Unlock()
	return c, nil
}

// uploadMonolithic is the distribution spec's two-request blob upload: POST to open, PUT with the
// whole body and the digest to commit.
func uploadMonolithic(ctx context.Context, c *http.Client, repo name.Repository, h v1.Hash, body io.Reader, size int64) error {
	base := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr()}
	start := base
	start.Path = "/v2/" + repo.RepositoryStr() + "/blobs/uploads/"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, start.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	err = transport.CheckError(resp, http.StatusAccepted) // reads the error body: close after
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	loc, err := base.Parse(resp.Header.Get("Location"))
	if err != nil {
		return fmt.Errorf("upload location: %w", err)
	}
	q := loc.Query()
	q.Set("digest", h.String())
	loc.RawQuery = q.Encode()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, loc.String(), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = c.Do(req)
	if err != nil {
		return err
	}
	err = transport.CheckError(resp, http.StatusCreated)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
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
