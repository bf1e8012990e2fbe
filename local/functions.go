package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/ports"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// instance is a function container the proxy routes to.
type instance struct {
	name string
	url  *url.URL
}

// worker reconciles queued keys until the queue closes.
func (p *Platform) worker(ctx context.Context) {
	for {
		k, ok := p.queue.next()
		if !ok {
			return
		}
		kind, rest, _ := strings.Cut(k, "/")
		ns, n, _ := strings.Cut(rest, "/")
		var err error
		switch kind {
		case "fn":
			err = p.reconcileFunction(ctx, ns, n)
		case "job":
			err = p.reconcileJob(ctx, ns, n)
		}
		if err != nil && ctx.Err() == nil {
			p.log.Error("reconcile", "key", k, "error", err)
		}
		p.queue.done(k)
	}
}

// reconcileFunction moves a function toward what its record asks for: built from its current code,
// running (unless its http triggers switch it off) in a healthy container the proxy routes to.
func (p *Platform) reconcileFunction(ctx context.Context, ns, fname string) error {
	fn, err := p.functions.Get(ctx, ns, fname)
	if errors.Is(err, api.ErrNotFound) {
		return p.cleanupFunction(ctx, ns, fname)
	}
	if err != nil {
		return err
	}
	if fn.Status.CodeSHA256 == "" {
		return nil // waiting for an upload
	}
	bs, err := getBuild(p.db, ns, fname)
	if err != nil {
		return err
	}
	want := buildState{CodeSHA256: fn.Status.CodeSHA256, Runtime: fn.Runtime, Entrypoint: fn.Entrypoint, RuntimeRef: p.runtimes[fn.Runtime]}
	if bs.Image == "" || bs.key() != want.key() {
		if bs.FailedKey == want.key() {
			// This exact build failed already; a new upload or spec change retries.
			return p.setStatus(ctx, ns, &fn, func(s *apiv1.FunctionStatus) {
				if s.Phase != apiv1.PhaseFailed {
					s.Phase, s.Message = apiv1.PhaseFailed, "the last build of this code failed; upload a fix"
				}
			})
		}
		if err := p.build(ctx, ns, &fn, &bs, want); err != nil {
			return err
		}
		p.enqueueJobsOf(ns, fname)
	}

	triggers, err := p.triggers.List(ctx, ns)
	if err != nil {
		return err
	}
	if off, names := api.DisabledBy(triggers, fname); off {
		p.stopFunction(ctx, ns, fname, "")
		return p.setStatus(ctx, ns, &fn, func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message = apiv1.PhaseReady, "stopped: disabled by trigger "+strings.Join(names, ", ")
		})
	}

	env := runEnv(fn)
	cname := containerName(ns, fname, bs.Image, env, fn.MemoryMB)
	p.mu.RLock()
	cur := p.routes[ns+"/"+fname]
	p.mu.RUnlock()
	if cur == nil || cur.name != cname || !p.running(ctx, cur.name) {
		inst, err := p.startFunction(ctx, ns, fname, bs.Image, cname, env, fn.MemoryMB)
		if err != nil {
			// The previous container, if any, keeps serving.
			return p.setStatus(ctx, ns, &fn, func(s *apiv1.FunctionStatus) {
				s.Phase, s.Message = apiv1.PhaseFailed, err.Error()
			})
		}
		p.mu.Lock()
		p.routes[ns+"/"+fname] = inst // the switch: new requests go to the new container from here on
		p.mu.Unlock()
		err = p.setStatus(ctx, ns, &fn, func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message, s.Image = apiv1.PhaseReady, "", bs.Image
		})
		// The old container gets SIGTERM and finishes what it is serving (up to the function's
		// timeout); Ready does not wait for it.
		p.jobWG.Add(1)
		go func() {
			defer p.jobWG.Done()
			p.stopFunction(context.WithoutCancel(ctx), ns, fname, cname)
		}()
		return err
	}
	return p.setStatus(ctx, ns, &fn, func(s *apiv1.FunctionStatus) {
		s.Phase, s.Message, s.Image = apiv1.PhaseReady, "", bs.Image
	})
}

// setStatus applies f to the function's status. snap is the record this reconcile acted on: if an
// upload or spec change landed since, the phase and message stay as the API set them (Pending), so a
// client never sees Ready for code that is not running yet; the change's own reconcile follows.
func (p *Platform) setStatus(ctx context.Context, ns string, snap *apiv1.Function, f func(*apiv1.FunctionStatus)) error {
	_, err := p.functions.Update(ctx, ns, snap.Name, func(fn *apiv1.Function) error {
		phase, msg := fn.Status.Phase, fn.Status.Message
		f(&fn.Status)
		if !sameSpec(fn, snap) {
			fn.Status.Phase, fn.Status.Message = phase, msg
		}
		return nil
	})
	if errors.Is(err, api.ErrNotFound) {
		return nil // deleted meanwhile; the delete reconciles next
	}
	return err
}

// build makes and pushes the function image; on failure the function is Failed with the reason and
// the previous image (and container) stay.
func (p *Platform) build(ctx context.Context, ns string, fn *apiv1.Function, bs *buildState, want buildState) error {
	if err := p.setStatus(ctx, ns, fn, func(s *apiv1.FunctionStatus) { s.Phase, s.Message = apiv1.PhaseBuilding, "" }); err != nil {
		return err
	}
	start := time.Now()
	image, info, err := p.buildImage(ctx, ns, *fn, want)
	d := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // stopping: the next start builds again
		}
		if userError(err) {
			// This code will fail the same way again: do not retry it until it changes.
			bs.FailedKey = want.key()
			putBuild(p.db, ns, fn.Name, *bs)
		}
		p.setStatus(ctx, ns, fn, func(s *apiv1.FunctionStatus) { s.Phase, s.Message = apiv1.PhaseFailed, "build failed: "+err.Error() })
		return fmt.Errorf("building %s/%s: %w", ns, fn.Name, err)
	}
	images := append(bs.Images, image)
	*bs = want
	bs.Image, bs.Images = image, images
	if err := putBuild(p.db, ns, fn.Name, *bs); err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	return p.setStatus(ctx, ns, fn, func(s *apiv1.FunctionStatus) {
		s.Image, s.LastBuiltAt = image, &now
		if info == nil {
			info = &apiv1.BuildInfo{}
		}
		info.DurationMS = d.Milliseconds()
		s.Build = info
		s.Message = "built; starting"
	})
}

// buildImage builds (with the cached dependency layer when the code has a manifest) and pushes.
func (p *Platform) buildImage(ctx context.Context, ns string, fn apiv1.Function, want buildState) (string, *apiv1.BuildInfo, error) {
	if want.RuntimeRef == "" {
		return "", nil, fmt.Errorf("runtime %q is not installed", fn.Runtime)
	}
	rc, err := p.code.Get(ctx, api.CodeKey(ns, fn.Name, want.CodeSHA256))
	if err != nil {
		return "", nil, fmt.Errorf("reading the uploaded code: %w", err)
	}
	defer rc.Close()
	f, ok := rc.(*os.File) // the directory code store hands out files, which are ReaderAts
	if !ok {
		return "", nil, errors.New("code store does not return seekable files")
	}
	st, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	src := oci.Source{RuntimeImage: want.RuntimeRef, Zip: f, ZipSize: st.Size(), ZipSHA256: want.CodeSHA256,
		Handler: fn.Entrypoint, Function: fn.Name, Namespace: ns, Runtime: fn.Runtime}
	manifests, err := deps.ManifestsInZip(f, st.Size(), fn.Runtime)
	if err != nil {
		return "", nil, fmt.Errorf("reading dependency manifests: %w", err)
	}
	var info *apiv1.BuildInfo
	if manifests != nil {
		rt, _ := runtimes.Lookup(fn.Runtime)
		index := p.cfg.PipIndexURL
		if fn.Runtime == "nodejs20" {
			index = p.cfg.NPMRegistry
		}
		dr, err := p.deps.Layer(ctx, deps.Spec{Runtime: fn.Runtime, RuntimeImage: want.RuntimeRef, Files: manifests,
			Namespace: ns, IndexURL: index}, rt.DepsDir)
		if err != nil {
			return "", nil, err
		}
		src.Deps, src.DepsKey = dr.Layer, dr.Key
		info = &apiv1.BuildInfo{DepsKey: dr.Key, DepsCached: dr.Cached, DepsWarning: dr.Warning}
	}
	res, err := p.builder.Build(ctx, src)
	if err != nil {
		return "", nil, err
	}
	defer res.Close()
	ref, err := p.builder.Push(ctx, res, p.regHost+"/"+ns+"/"+fn.Name+":latest")
	if err != nil {
		return "", nil, err
	}
	return ref.String(), info, nil
}

// runEnv is what a function's container gets at run time: never baked into the image.
func runEnv(fn apiv1.Function) map[string]string {
	env := map[string]string{}
	for k, v := range fn.EnvVars {
		env[k] = v
	}
	env["TIMEOUT_SEC"] = strconv.Itoa(max(fn.TimeoutSec, 1))
	env["GRACE_SEC"] = strconv.Itoa(max(fn.TimeoutSec, 1) + 2) // a stopping container finishes its requests
	env["HOST"] = "127.0.0.1"
	return env
}

// containerName is sless-<ns>-<name>-<digest12>-<config6>: an update (new digest) or a new run
// configuration (env vars, timeout, memory) starts a container beside the old one.
func containerName(ns, fname, image string, env map[string]string, memoryMB int) string {
	_, digest, _ := strings.Cut(image, "@sha256:")
	h := sha256.New()
	fmt.Fprintf(h, "memory=%d\n", memoryMB)
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(h, "%s=%s\n", k, env[k])
	}
	return fmt.Sprintf("sless-%s-%s-%.12s-%s", ns, fname, digest, hex.EncodeToString(h.Sum(nil))[:6])
}

// startFunction runs (or adopts) the container and waits until /health answers.
func (p *Platform) startFunction(ctx context.Context, ns, fname, image, cname string, env map[string]string, memoryMB int) (*instance, error) {
	if inst := p.adopt(ctx, cname); inst != nil {
		return inst, nil
	}
	p.podman.remove(ctx, cname) // a stopped leftover of the same name
	port, err := ports.Free()
	if err != nil {
		return nil, err
	}
	env["PORT"] = strconv.Itoa(port)
	labels := map[string]string{labelInstance: p.instance, labelNamespace: ns, labelFunction: fname,
		labelPort: strconv.Itoa(port), labelRole: "function"}
	if err := p.podman.start(ctx, containerSpec{name: cname, image: image, labels: labels, env: env, detach: true, memoryMB: memoryMB}); err != nil {
		return nil, fmt.Errorf("starting the container: %w", err)
	}
	u, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(port))
	inst := &instance{name: cname, url: u}
	if err := p.waitHealthy(ctx, inst); err != nil {
		stdout, stderr := p.podman.logs(ctx, cname, 20)
		p.podman.remove(context.WithoutCancel(ctx), cname)
		return nil, fmt.Errorf("%v; last output:\n%s", err, strings.TrimSpace(lastLines(stderr+stdout, 15)))
	}
	return inst, nil
}

// adopt takes over a running container of this name (after a restart of sless up). A running
// container is never removed for answering /health slowly: a busy handler can stall it.
func (p *Platform) adopt(ctx context.Context, cname string) *instance {
	cs, err := p.podman.list(ctx, p.instance)
	if err != nil {
		return nil
	}
	for _, c := range cs {
		if c.Name == cname && c.State == "running" {
			u, err := url.Parse("http://127.0.0.1:" + c.Labels[labelPort])
			if err != nil {
				return nil
			}
			inst := &instance{name: cname, url: u}
			if p.waitHealthy(ctx, inst) == nil {
				return inst
			}
		}
	}
	return nil
}

// running reports whether the container exists and runs.
func (p *Platform) running(ctx context.Context, cname string) bool {
	st, err := p.podman.state(ctx, cname)
	return err == nil && st == "running"
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

func (p *Platform) healthy(ctx context.Context, inst *instance) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, inst.url.String()+"/health", nil)
	resp, err := healthClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitHealthy polls /health until it answers, the container exits, or 60 s pass.
func (p *Platform) waitHealthy(ctx context.Context, inst *instance) error {
	deadline := time.Now().Add(60 * time.Second)
	lastState := time.Now()
	for time.Now().Before(deadline) {
		if p.healthy(ctx, inst) {
			return nil
		}
		if time.Since(lastState) > 500*time.Millisecond {
			lastState = time.Now()
			if st, err := p.podman.state(ctx, inst.name); err == nil && st != "running" && st != "created" {
				return fmt.Errorf("the function exited at start (%s)", st)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("the function did not answer /health within 60 s")
}

// stopFunction removes the function's containers except keep (and the route, if it pointed at one).
func (p *Platform) stopFunction(ctx context.Context, ns, fname, keep string) {
	p.mu.Lock()
	if cur := p.routes[ns+"/"+fname]; cur != nil && cur.name != keep {
		delete(p.routes, ns+"/"+fname)
	}
	p.mu.Unlock()
	cs, err := p.podman.list(ctx, p.instance)
	if err != nil {
		return
	}
	grace := 5
	if fn, err := p.functions.Get(ctx, ns, fname); err == nil {
		grace = max(fn.TimeoutSec, 1) + 5
	}
	for _, c := range cs {
		if c.Labels[labelRole] == "function" && c.Labels[labelNamespace] == ns && c.Labels[labelFunction] == fname && c.Name != keep {
			p.podman.removeWithin(ctx, c.Name, grace)
		}
	}
}

// cleanupFunction removes everything of a deleted function: containers, images, records.
func (p *Platform) cleanupFunction(ctx context.Context, ns, fname string) error {
	p.stopFunction(ctx, ns, fname, "")
	bs, err := getBuild(p.db, ns, fname)
	if err != nil {
		return err
	}
	for _, img := range bs.Images {
		ref, err := name.NewDigest(img)
		if err == nil {
			if err := remote.Delete(ref, remote.WithContext(ctx)); err != nil && !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
				p.log.Warn("deleting image", "image", img, "error", err)
			}
		}
	}
	// Stored code is removed by the API when the function is deleted; removing it here could take
	// the upload of a function re-created under the same name meanwhile.
	if err := p.inv.forget(ns, fname); err != nil {
		return err
	}
	return deleteBuild(p.db, ns, fname)
}

// userError reports whether a build failed because of the code or its manifests (it will fail the
// same way again) rather than the platform (registry, disk), which is worth retrying.
func userError(err error) bool {
	var ee *layers.EntryError
	var ie *deps.InstallError
	return errors.As(err, &ee) || errors.As(err, &ie) || errors.Is(err, oci.ErrInvalidSource) || errors.Is(err, deps.ErrInvalidSpec) ||
		errors.Is(err, layers.ErrInvalidArchive) || errors.Is(err, layers.ErrTooLarge) || errors.Is(err, layers.ErrCompressionRatio)
}

// sameSpec reports whether a and b ask for the same running function (code, runtime, settings).
func sameSpec(a, b *apiv1.Function) bool {
	return a.Status.CodeSHA256 == b.Status.CodeSHA256 && a.Runtime == b.Runtime && a.Entrypoint == b.Entrypoint &&
		a.MemoryMB == b.MemoryMB && a.TimeoutSec == b.TimeoutSec && maps.Equal(a.EnvVars, b.EnvVars)
}
