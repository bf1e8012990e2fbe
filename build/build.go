package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// Request is one build of a function's code.
type Request struct {
	Namespace, Function string
	// Runtime names the runtime ("python3.11"); its image comes from the Pipeline's runtimes.
	Runtime    string
	Entrypoint string
	// CodeSHA256 names the archive in the code store; the fetched bytes must hash to it.
	CodeSHA256 string
	// Deps obtains the dependency layer when the code declares dependencies. The default is the
	// Pipeline's (WithDeps).
	Deps Deps
}

// Deps obtains the dependency layer of a spec, placed under dir. *deps.Cache is one; a backend
// that makes the layer elsewhere returns a *PendingError until it is there.
type Deps interface {
	Layer(ctx context.Context, s deps.Spec, dir string) (deps.Result, error)
}

var _ Deps = (*deps.Cache)(nil)

// Result is a pushed function image.
type Result struct {
	// Image is the image by digest ("<registry>/<ns>/<fn>@sha256:…").
	Image string
	// Key is the build's identity (Key).
	Key      string
	Duration time.Duration
	// DepsKey names the dependency layer ("" without dependencies); DepsCached is true when no
	// install ran for this build; DepsWarning says what the install could not guarantee.
	DepsKey     string
	DepsCached  bool
	DepsWarning string
}

// Pipeline builds and pushes function images. It is safe for concurrent use and lives as long as
// its backend.
type Pipeline struct {
	code    codestore.Store
	builder *oci.Builder
	o       options
	slots   chan struct{}

	events *fnlog.Events

	mu      sync.Mutex
	tenants map[string]int // builds running per namespace
}

// Events is where the pipeline records a build's stages; a backend's controller records the
// stages after it (Starting, Ready) through the same one.
func (p *Pipeline) Events() *fnlog.Events { return p.events }

// New makes a Pipeline that reads archives from code and builds with builder.
func New(code codestore.Store, builder *oci.Builder, opts ...Option) (*Pipeline, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, err
	}
	if code == nil || builder == nil {
		return nil, errors.New("build: a code store and an oci.Builder are required")
	}
	return &Pipeline{code: code, builder: builder, o: o, slots: make(chan struct{}, o.concurrency), tenants: map[string]int{},
		events: fnlog.NewEvents(code)}, nil
}

// RuntimeImage is the image by digest that functions of runtime rt are built on.
func (p *Pipeline) RuntimeImage(rt string) (string, bool) {
	ref, ok := p.o.runtimes[rt]
	return ref, ok
}

// Key is the identity of what req builds: the code, the runtime image (by digest) and the
// entrypoint. The same key gives the same image digest; a backend rebuilds when it changes and,
// after a user error, not before it changes.
func (p *Pipeline) Key(req Request) string {
	return Key(req, p.o.runtimes[req.Runtime])
}

// Key is Pipeline.Key for a known runtime image.
func Key(req Request, runtimeImage string) string {
	h := sha256.New()
	fmt.Fprintf(h, "sless build v1\ncode %s\nruntime %s\nruntime-image %s\nentrypoint %s\n", req.CodeSHA256, req.Runtime, runtimeImage, req.Entrypoint)
	return hex.EncodeToString(h.Sum(nil))
}

// Build fetches the code, obtains the dependency layer, builds and pushes the image. A failure
// that is the function's own satisfies IsUserError. A *PendingError means it cannot run now: its
// dependency layer is being made elsewhere, or every build slot (WithConcurrency) or its tenant's
// (WithTenantConcurrency) is taken. It never waits for a slot, so a tenant whose builds hang holds
// its own slots only, and the caller's workers stay free for other tenants.
func (p *Pipeline) Build(ctx context.Context, req Request) (res *Result, err error) {
	if !p.acquire(req.Namespace) {
		return nil, &PendingError{Reason: "waiting for a build slot", RetryAfter: slotRetry}
	}
	defer p.release(req.Namespace)
	ctx, cancel := context.WithTimeout(ctx, p.o.timeout)
	defer cancel()
	start := time.Now()
	// The build log and the events are the author's view of this build (GET …/logs?source=build,
	// …/events): saved whatever the outcome, a build waiting for its dependency job included.
	blog := fnlog.NewLog("build", apiv1.StreamBuild)
	event := func(typ, reason, format string, args ...any) {
		p.events.Record(context.WithoutCancel(ctx), req.Namespace, req.Function,
			apiv1.Event{Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...), CodeSHA256: req.CodeSHA256})
	}
	blog.Printf("build of %s/%s: code %s, runtime %s, entrypoint %s", req.Namespace, req.Function, short(req.CodeSHA256), req.Runtime, req.Entrypoint)
	defer func() {
		var pending *PendingError
		switch {
		case errors.As(err, &pending):
			blog.Printf("waiting: %s", pending.Reason)
		case err != nil && ctx.Err() == context.Canceled:
			blog.Printf("cancelled after %v", time.Since(start).Round(time.Millisecond))
		case err != nil:
			blog.Printf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			event(apiv1.EventWarning, apiv1.ReasonFailed, "build failed: %v", err)
		default:
			blog.Printf("built %s in %v", res.Image, res.Duration.Round(time.Millisecond))
			event(apiv1.EventNormal, apiv1.ReasonBuilt, "built %s in %d ms", res.Image, res.Duration.Milliseconds())
		}
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		fnlog.Save(sctx, p.code, fnlog.BuildKey(req.Namespace, req.Function), blog.Lines())
	}()
	defer func() {
		if _, pending := errors.AsType[*PendingError](err); !pending && p.o.observe != nil && ctx.Err() != context.Canceled {
			o := Observation{Result: "succeeded", Duration: time.Since(start), Runtime: req.Runtime}
			switch {
			case err != nil && Reason(err) == ReasonDependenciesFailed:
				o.Result, o.Dependencies = "failed", "failed"
			case err != nil:
				o.Result = "failed"
			case res.DepsKey != "" && res.DepsCached:
				o.Dependencies = "cached"
			case res.DepsKey != "":
				o.Dependencies = "installed"
			}
			p.o.observe(o)
		}
	}()

	runtimeImage, ok := p.o.runtimes[req.Runtime]
	rt, known := runtimes.Lookup(req.Runtime)
	if !ok || !known {
		return nil, fmt.Errorf("%w: runtime %q is not installed on this platform", oci.ErrInvalidSource, req.Runtime)
	}
	code, size, err := p.fetch(ctx, req)
	if err != nil {
		return nil, err
	}
	defer func() { code.Close(); os.Remove(code.Name()) }()
	blog.Printf("stored: code %s, %d bytes, read from the code store", short(req.CodeSHA256), size)
	event(apiv1.EventNormal, apiv1.ReasonStored, "code %s (%d bytes) is stored", short(req.CodeSHA256), size)

	res = &Result{Key: Key(req, runtimeImage)}
	src := oci.Source{RuntimeImage: runtimeImage, Zip: code, ZipSize: size, ZipSHA256: req.CodeSHA256,
		Handler: req.Entrypoint, Function: req.Function, Namespace: req.Namespace, Runtime: req.Runtime, Executable: rt.Executable}
	manifests, err := deps.ManifestsInZip(code, size, req.Runtime)
	if err != nil {
		return nil, fmt.Errorf("%w: reading dependency manifests: %v", deps.ErrInvalidSpec, err)
	}
	if manifests != nil {
		d := req.Deps
		if d == nil {
			d = p.o.deps
		}
		if d == nil {
			return nil, ErrNoDeps
		}
		spec := deps.Spec{Runtime: req.Runtime, RuntimeImage: runtimeImage, Files: manifests, Namespace: req.Namespace,
			IndexURL: p.o.indexes[rt.Language], Log: blog}
		names := make([]string, 0, len(manifests))
		for n := range manifests {
			names = append(names, n)
		}
		slices.Sort(names)
		key, _ := deps.Key(spec)
		blog.Printf("dependencies: %s, key %s", strings.Join(names, ", "), short(key))
		installing := false
		spec.Installing = func() {
			// The install may take minutes: its stage is reported, and the log saved, as it begins.
			installing = true
			blog.Printf("dependency layer %s: cache miss, installing", short(key))
			event(apiv1.EventNormal, apiv1.ReasonInstallingDependencies, "installing the dependencies (key %s)", short(key))
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer scancel()
			fnlog.Save(sctx, p.code, fnlog.BuildKey(req.Namespace, req.Function), blog.Lines())
		}
		depStart := time.Now()
		dr, err := d.Layer(ctx, spec, rt.DepsDir)
		if err != nil {
			if _, pending := errors.AsType[*PendingError](err); pending {
				event(apiv1.EventNormal, apiv1.ReasonInstallingDependencies, "installing the dependencies (key %s)", short(key))
			}
			return nil, err
		}
		switch {
		case dr.Cached:
			blog.Printf("dependency layer %s: cache hit, no install", short(dr.Key))
		case installing:
			blog.Printf("dependency layer %s: installed in %v", short(dr.Key), time.Since(depStart).Round(time.Millisecond))
		default: // made elsewhere (a Job) or by a concurrent build of the same key
			blog.Printf("dependency layer %s: cache miss, installed in %v", short(dr.Key), time.Since(depStart).Round(time.Millisecond))
			event(apiv1.EventNormal, apiv1.ReasonInstallingDependencies, "installed the dependencies (key %s) in %d ms", short(dr.Key), time.Since(depStart).Milliseconds())
		}
		if dr.Warning != "" {
			blog.Printf("warning: %s", dr.Warning)
		}
		src.Deps, src.DepsKey = dr.Layer, dr.Key
		res.DepsKey, res.DepsCached, res.DepsWarning = dr.Key, dr.Cached, dr.Warning
	}
	event(apiv1.EventNormal, apiv1.ReasonBuilding, "building the image on %s", runtimeImage)
	blog.Printf("building: the code as a layer on %s", runtimeImage)
	built, err := p.builder.Build(ctx, src)
	if err != nil {
		return nil, err
	}
	defer built.Close()
	// The version tag first: Distribution lists no untagged manifests, so an image that :latest
	// no longer names is found for collection (CollectImages) by it, even after a crash between
	// the two.
	repo := p.o.registry + "/" + req.Namespace + "/" + req.Function
	event(apiv1.EventNormal, apiv1.ReasonPushing, "pushing to %s", repo)
	blog.Printf("pushing to %s", repo)
	ref, err := p.builder.Push(ctx, built, repo+":"+VersionTag(res.Key))
	if err != nil {
		return nil, err
	}
	if err := p.builder.Tag(ctx, ref.String(), "latest"); err != nil {
		return nil, err
	}
	res.Image, res.Duration = ref.String(), time.Since(start)
	return res, nil
}

// Running is how many builds hold a slot now.
func (p *Pipeline) Running() int { return len(p.slots) }

// slotRetry is how soon a build that found no free slot is worth trying again.
const slotRetry = time.Second

// acquire takes a build slot and one of ns's, or neither.
func (p *Pipeline) acquire(ns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.o.tenantConcurrency > 0 && p.tenants[ns] >= p.o.tenantConcurrency {
		return false
	}
	select {
	case p.slots <- struct{}{}:
	default:
		return false
	}
	p.tenants[ns]++
	return true
}

func (p *Pipeline) release(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	<-p.slots
	if p.tenants[ns]--; p.tenants[ns] <= 0 {
		delete(p.tenants, ns)
	}
}

// fetch copies the archive into a temporary file (the builder and the manifest reader need
// random access) and checks that it hashes to the name it is stored under: whoever can write the
// code store must not be able to ship other code to a tenant.
func (p *Pipeline) fetch(ctx context.Context, req Request) (*os.File, int64, error) {
	rc, err := p.code.Get(ctx, codestore.Key(req.Namespace, req.Function, req.CodeSHA256))
	if errors.Is(err, codestore.ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: the uploaded code %s is not in the code store; upload it again", ErrCodeMissing, short(req.CodeSHA256))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the uploaded code: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(p.o.tempDir, "sless-code-*.zip")
	if err != nil {
		return nil, 0, err
	}
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), rc)
	if err == nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != req.CodeSHA256 {
			err = fmt.Errorf("%w: the stored archive hashes to %s, not %s; upload it again", ErrCodeMismatch, short(got), short(req.CodeSHA256))
		}
	} else {
		err = fmt.Errorf("reading the uploaded code: %w", err)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, 0, err
	}
	return tmp, size, nil
}

// DeleteImages removes function images (by digest) from the registry with the builder's
// credentials; images already gone are skipped. Every image is tried; the errors are joined.
func (p *Pipeline) DeleteImages(ctx context.Context, refs ...string) error {
	var errs []error
	for _, ref := range refs {
		if err := p.builder.Delete(ctx, ref); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func short(sha string) string { return sha[:min(12, len(sha))] }
