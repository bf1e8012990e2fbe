package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// reconcileFunction moves a function toward what its spec asks for: built from its current code,
// running (unless its http triggers switch it off) in a healthy container the proxy routes to. Its
// status moves only through package lifecycle's state machine, as on Kubernetes.
func (c *controller) reconcileFunction(ctx context.Context, ns, name string) error {
	p := c.p
	obj, err := p.db.Functions.Get(ctx, ns, name)
	if errors.Is(err, objects.ErrNotFound) {
		return c.cleanupFunction(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	// The status describes the generation read here; a spec that moved on meanwhile keeps
	// showing Pending until its own reconcile.
	st := status{db: p.db, ns: ns, name: name, generation: obj.Generation}
	apply := st.apply
	if obj.Spec.CodeSHA256 == "" {
		return apply(lifecycle.WaitingForCode{})
	}
	image, err := c.ensureBuilt(ctx, ns, obj, apply)
	if err != nil || image == "" {
		return err
	}
	return c.ensureRunning(ctx, ns, obj.Spec, image, st)
}

// status moves one function's status through the lifecycle, as of the generation read.
type status struct {
	db         *state.DB
	ns, name   string
	generation int64
}

func (s status) apply(e lifecycle.Event) error {
	return s.applyTo(func(lifecycle.FunctionStatus) lifecycle.Event { return e })
}

// applyTo applies the event f makes of the stored status.
func (s status) applyTo(f func(lifecycle.FunctionStatus) lifecycle.Event) error {
	return ignoreNotFound(s.db.Functions.UpdateStatus(s.ns, s.name, s.generation, func(st *lifecycle.FunctionStatus) {
		*st = lifecycle.Next(*st, f(*st), time.Now())
	}))
}

// ensureBuilt returns the image of the spec's current build, building it when the build key
// changed. "" without an error: this build failed through the function's own fault (its status
// says why) and is not retried until the key changes.
func (c *controller) ensureBuilt(ctx context.Context, ns string, obj objects.Function, apply func(lifecycle.Event) error) (string, error) {
	p, spec := c.p, obj.Spec
	req := build.Request{Namespace: ns, Function: spec.Name, Runtime: spec.Runtime, Entrypoint: spec.Entrypoint, CodeSHA256: spec.CodeSHA256}
	k := c.pipeline.Key(req)
	st, err := c.adoptBuildRecord(ns, obj, req, k)
	if err != nil {
		return "", err
	}
	if st.Image != "" && st.BuildKey == k {
		return st.Image, nil
	}
	if !st.BuildDue(k) {
		return "", nil // this exact build failed already; a new upload or spec change retries
	}
	if wait := st.RetryWait(k, time.Now()); wait > 0 {
		// The platform failed this build a moment ago: a resync or another event does not bring
		// the next attempt forward.
		return "", requeueAfter(wait)
	}
	if err := apply(lifecycle.BuildStarted{Key: k, CodeSHA256: spec.CodeSHA256}); err != nil {
		return "", err
	}
	res, err := c.pipeline.Build(ctx, req)
	if pe, ok := errors.AsType[*build.PendingError](err); ok {
		// No build slot free (this tenant's, or any): look again soon, without holding a worker.
		if err := apply(lifecycle.BuildPending{Dependencies: pe.Dependencies, Reason: pe.Reason}); err != nil {
			return "", err
		}
		return "", requeueAfter(pe.RetryAfter)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err() // stopping: the next start builds again
		}
		user := build.IsUserError(err)
		if err := apply(lifecycle.BuildFailed{Key: k, Message: build.Message(err), User: user}); err != nil {
			return "", err
		}
		if user {
			p.log.Info("build failed", "namespace", ns, "function", spec.Name, "error", err)
			return "", nil
		}
		// The work queue retries it with lifecycle's backoff.
		return "", fmt.Errorf("building %s/%s: %w", ns, spec.Name, err)
	}
	b, err := p.db.Build(ns, spec.Name)
	if err != nil {
		return "", err
	}
	b.Images = append(b.Images, res.Image)
	if err := p.db.PutBuild(ns, spec.Name, b); err != nil {
		return "", err
	}
	if err := apply(lifecycle.BuildSucceeded{Key: res.Key, CodeSHA256: spec.CodeSHA256, Image: res.Image,
		Info: apiv1.BuildInfo{DurationMS: res.Duration.Milliseconds(), DepsKey: res.DepsKey, DepsCached: res.DepsCached, DepsWarning: res.DepsWarning}}); err != nil {
		return "", err
	}
	c.enqueueJobsOf(ns, spec.Name)
	return res.Image, nil
}

// adoptBuildRecord carries over what an earlier sless up kept of the function's build beside its
// status (the build key, the failure latch and the image in the build record; before that, a
// build identity of its own), so that an upgrade rebuilds nothing. It returns the status.
func (c *controller) adoptBuildRecord(ns string, obj objects.Function, req build.Request, k string) (lifecycle.FunctionStatus, error) {
	p, spec, st := c.p, obj.Spec, obj.Status
	b, err := p.db.Build(ns, spec.Name)
	if err != nil || (b.Legacy == "" && b.LegacyFailed == "" && b.Key == "" && b.FailedKey == "" && b.Image == "") {
		return st, err
	}
	if b.Legacy != "" || b.LegacyFailed != "" {
		runtimeImage, _ := c.pipeline.RuntimeImage(spec.Runtime)
		legacy := state.LegacyKey(spec.CodeSHA256, spec.Runtime, spec.Entrypoint, runtimeImage)
		if b.Legacy == legacy {
			b.Key = k
		}
		if b.LegacyFailed == legacy {
			b.FailedKey = k
		}
	}
	err = p.db.Functions.UpdateStatus(ns, spec.Name, 0, func(s *lifecycle.FunctionStatus) {
		if s.BuildKey == "" && b.Key != "" {
			s.BuildKey, s.Image = b.Key, cmp.Or(s.Image, b.Image)
		}
		if s.FailedBuildKey == "" {
			s.FailedBuildKey = b.FailedKey
		}
		st = *s
	})
	if err != nil {
		return st, ignoreNotFound(err)
	}
	b.Legacy, b.LegacyFailed, b.Key, b.FailedKey, b.Image = "", "", "", "", ""
	return st, p.db.PutBuild(ns, spec.Name, b)
}

// ensureRunning runs image as the function's container (a new one beside the old, which goes once
// /fn/ switched), or none when its http triggers switch it off.
func (c *controller) ensureRunning(ctx context.Context, ns string, spec objects.FunctionSpec, image string, st status) error {
	p, apply := c.p, st.apply
	triggers, err := p.db.Triggers.List(ctx, ns)
	if err != nil {
		return err
	}
	grace := runspec.GraceSec(spec.TimeoutSec) + 3
	if off, names := runspec.DisabledBy(objects.WireTriggers(triggers), spec.Name); off {
		p.run.Stop(ctx, ns, spec.Name, "", grace)
		c.scaler.forget(ns, spec.Name)
		return apply(lifecycle.Disabled{Triggers: names})
	}
	f, err := p.runnerFunction(ctx, ns, spec, image)
	if ms, ok := errors.AsType[*missingSecret](err); ok {
		// Not retried: a change of the secret enqueues the function again (controller.changed).
		// The version serving, if any, keeps serving.
		// A resync finds it again: one event per failure, not one per look.
		if cur, gerr := p.db.Functions.Get(ctx, ns, spec.Name); gerr != nil || cur.Status.Phase != apiv1.PhaseFailed || cur.Status.Message != ms.message {
			c.pipeline.Events().Record(ctx, ns, spec.Name, apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, CodeSHA256: spec.CodeSHA256,
				Message: "start failed: " + ms.message})
		}
		return apply(lifecycle.StartFailed{Message: ms.message})
	}
	if err != nil {
		return err
	}
	version := p.run.ContainerName(f)
	b, err := p.db.Build(ns, spec.Name)
	if err != nil {
		return err
	}
	switch {
	case p.run.Serving(ns, spec.Name) == version:
		// Serving: the autoscaler owns the count (and replaces containers that died: PruneAll).
	case b.Started == version:
		// Started before (this is a restart of sless up, or the version's instances were all
		// stopped): it serves from zero, and the autoscaler starts what the load or min_replicas
		// ask for.
		p.run.Switch(f, nil)
		c.stopOthers(ctx, ns, spec.Name, version, grace)
	default:
		// A new version starts one instance that answers its health check before it serves.
		events := c.pipeline.Events()
		events.Record(ctx, ns, spec.Name, apiv1.Event{Reason: apiv1.ReasonStarting, CodeSHA256: spec.CodeSHA256,
			Message: "starting the first instance of " + image})
		if err := apply(lifecycle.Starting{Image: image}); err != nil {
			return err
		}
		inst, err := p.run.Serve(ctx, f)
		if err != nil {
			// The previous version, if any, keeps serving; the start is retried with backoff.
			events.Record(ctx, ns, spec.Name, apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, CodeSHA256: spec.CodeSHA256,
				Message: "start failed: " + err.Error()})
			if serr := apply(lifecycle.StartFailed{Message: err.Error()}); serr != nil {
				return serr
			}
			return fmt.Errorf("starting %s/%s: %w", ns, spec.Name, err)
		}
		events.Record(ctx, ns, spec.Name, apiv1.Event{Reason: apiv1.ReasonReady, CodeSHA256: spec.CodeSHA256,
			Message: "serving " + image + " from " + inst.Name})
		p.run.Switch(f, inst) // new requests go to the new version from here on
		b.Started = version
		if err := p.db.PutBuild(ns, spec.Name, b); err != nil {
			return err
		}
		c.collectImages(ctx, ns, spec.Name, image)
		c.stopOthers(ctx, ns, spec.Name, version, grace)
	}
	c.scaler.poke(ns, spec.Name) // scale the version to what its load and min_replicas ask for
	ready, starting := p.run.Scale(ns, spec.Name)
	return st.applyTo(func(s lifecycle.FunctionStatus) lifecycle.Event {
		return lifecycle.Ready{Image: image, Replicas: ready, Desired: max(s.DesiredReplicas, ready+starting)}
	})
}

// stopOthers stops, in the background, the function's containers of versions other than version:
// each gets SIGTERM and finishes what it is serving (up to the function's timeout); Ready does not
// wait for it.
func (c *controller) stopOthers(ctx context.Context, ns, name, version string, grace int) {
	c.runs.Add(1)
	go func() {
		defer c.runs.Done()
		c.p.run.Stop(context.WithoutCancel(ctx), ns, name, version, grace)
	}()
}

// collectImages deletes the function's earlier images from the registry once image serves
// (podman keeps what the old container runs). It runs in the function's reconcile, so no build of
// it pushes meanwhile; a failure is logged and the next version collects again.
func (c *controller) collectImages(ctx context.Context, ns, name, image string) {
	p := c.p
	deleted, err := c.pipeline.CollectImages(ctx, ns, name, image)
	if err != nil {
		p.log.Warn("deleting earlier images", "namespace", ns, "function", name, "error", err)
		return
	}
	if len(deleted) > 0 {
		p.log.Info("deleted earlier images", "namespace", ns, "function", name, "images", len(deleted))
	}
	b, err := p.db.Build(ns, name)
	if err == nil {
		b.Images = []string{image}
		err = p.db.PutBuild(ns, name, b)
	}
	if err != nil {
		p.log.Warn("recording the function's images", "namespace", ns, "function", name, "error", err)
	}
}

// collectDeps deletes the dependency layers no function's current build mounts, with their pins
// (deps.Pins.DropPin), so the next build of such a key installs again. Skipped while a build
// runs: it may be about to mount a layer no function records yet.
func (c *controller) collectDeps(ctx context.Context) error {
	if c.pipeline.Running() > 0 {
		return nil
	}
	fns, err := c.p.db.Functions.All()
	if err != nil {
		return err
	}
	inUse := map[string]bool{}
	for _, l := range fns {
		for _, f := range l {
			if f.Status.Build != nil && f.Status.Build.DepsKey != "" {
				inUse[f.Status.Build.DepsKey] = true
			}
		}
	}
	deleted, err := c.pipeline.CollectDeps(ctx, func(key string) bool { return inUse[key] }, c.p.db)
	if len(deleted) > 0 {
		c.p.log.Info("deleted unreferenced dependency layers", "keys", deleted)
	}
	return err
}

// cleanupFunction removes everything of a deleted function: containers, images, records.
func (c *controller) cleanupFunction(ctx context.Context, ns, name string) error {
	p := c.p
	p.run.Stop(ctx, ns, name, "", 5)
	c.scaler.forget(ns, name)
	p.run.ForgetLogs(ns, name)
	b, err := p.db.Build(ns, name)
	if err != nil {
		return err
	}
	// Every version the repository holds (keeping none), and the recorded ones pushed before
	// versions were tagged. The registry is this process's own; a failure is logged, not retried.
	_, err = c.pipeline.CollectImages(ctx, ns, name)
	if err = errors.Join(err, c.pipeline.DeleteImages(ctx, b.Images...)); err != nil {
		p.log.Warn("deleting images", "namespace", ns, "function", name, "error", err)
	}
	// Stored code and invocation records are removed by the API when the function is deleted;
	// removing the code here could take the upload of a function re-created under the same name.
	return p.db.DeleteBuild(ns, name)
}

func ignoreNotFound(err error) error {
	if errors.Is(err, objects.ErrNotFound) {
		return nil // deleted meanwhile; the delete reconciles next
	}
	return err
}

// runnerFunction is what the runner runs for ns's function spec at image: in the tenant's own
// range of host uids (allocated on its first container), so that one tenant's processes never
// count against another's limits, with the values of the secrets it refers to. A secret or key
// that is missing is a *missingSecret.
func (p *Platform) runnerFunction(ctx context.Context, ns string, spec objects.FunctionSpec, image string) (runner.Function, error) {
	f := runner.Function{Namespace: ns, Name: spec.Name, Image: image, Env: spec.EnvVars, TimeoutSec: spec.TimeoutSec, MemoryMB: spec.MemoryMB}
	if err := p.withSecrets(ns, spec, &f); err != nil {
		return f, err
	}
	var err error
	f.IDBase, err = p.uids.base(ctx, ns)
	return f, err
}

// missingSecret is a start that cannot happen until a secret or key the function refers to
// exists: the message names them, never a value.
type missingSecret struct{ message string }

func (e *missingSecret) Error() string { return e.message }

// withSecrets opens the secrets spec refers to and gives f their values, and the part of the
// run configuration they make (their versions and how spec uses them).
func (p *Platform) withSecrets(ns string, spec objects.FunctionSpec, f *runner.Function) error {
	refs := spec.Secrets()
	names := refs.Names()
	if len(names) == 0 {
		return nil
	}
	data := map[string]map[string]string{}
	metas := map[string]objects.SecretMeta{}
	for _, n := range names {
		d, m, ok, err := p.secrets.Values(ns, n)
		if err != nil {
			return err
		}
		if ok {
			data[n], metas[n] = d, m
		}
	}
	if msg := refs.Missing(func(n string) ([]string, bool) { m, ok := metas[n]; return m.Keys, ok }); msg != "" {
		return &missingSecret{msg}
	}
	f.SecretEnv = map[string]string{}
	for env, ref := range spec.SecretEnv {
		n, k, _ := strings.Cut(ref, "/")
		f.SecretEnv[env] = data[n][k]
	}
	f.SecretFiles = map[string]map[string]string{}
	for path, n := range spec.SecretFiles {
		f.SecretFiles[path] = data[n]
	}
	how, _ := json.Marshal([]any{spec.SecretEnv, spec.SecretFiles})
	f.Secrets = refs.Versions(func(n string) int64 { return metas[n].Version }) + " " + string(how)
	return nil
}
