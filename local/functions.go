package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/runspec"
)

// reconcileFunction moves a function toward what its spec asks for: built from its current code,
// running (unless its http triggers switch it off) in a healthy container the proxy routes to.
func (c *controller) reconcileFunction(ctx context.Context, ns, name string) error {
	p := c.p
	obj, err := p.db.Functions.Get(ctx, ns, name)
	if errors.Is(err, api.ErrNotFound) {
		return c.cleanupFunction(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	// The status describes the generation read here; a spec that moved on meanwhile keeps
	// showing Pending until its own reconcile.
	setStatus := func(f func(*apiv1.FunctionStatus)) error {
		return ignoreNotFound(p.db.Functions.UpdateStatus(ns, name, obj.Generation, f))
	}
	if obj.Spec.CodeSHA256 == "" {
		return setStatus(func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message = apiv1.PhasePending, "waiting for code: upload a zip"
		})
	}
	image, err := c.ensureBuilt(ctx, ns, obj.Spec, setStatus)
	if err != nil || image == "" {
		return err
	}
	return c.ensureRunning(ctx, ns, obj.Spec, image, setStatus)
}

// ensureBuilt returns the image of the spec's current build, building it when the build key
// changed. "" without an error: this build failed through the function's own fault (its status
// says why) and is not retried until the key changes.
func (c *controller) ensureBuilt(ctx context.Context, ns string, spec api.FunctionSpec, setStatus func(func(*apiv1.FunctionStatus)) error) (string, error) {
	p := c.p
	b, err := p.db.Build(ns, spec.Name)
	if err != nil {
		return "", err
	}
	req := build.Request{Namespace: ns, Function: spec.Name, Runtime: spec.Runtime, Entrypoint: spec.Entrypoint, CodeSHA256: spec.CodeSHA256}
	k := c.pipeline.Key(req)
	if b.Legacy != "" || b.LegacyFailed != "" {
		// Built by an earlier sless up: its identity of the same inputs becomes the key, so an
		// upgrade rebuilds nothing.
		runtimeImage, _ := c.pipeline.RuntimeImage(spec.Runtime)
		legacy := state.LegacyKey(spec.CodeSHA256, spec.Runtime, spec.Entrypoint, runtimeImage)
		if b.Legacy == legacy {
			b.Key = k
		}
		if b.LegacyFailed == legacy {
			b.FailedKey = k
		}
		b.Legacy, b.LegacyFailed = "", ""
		if err := p.db.PutBuild(ns, spec.Name, b); err != nil {
			return "", err
		}
	}
	if b.Image != "" && b.Key == k {
		return b.Image, nil
	}
	if b.FailedKey == k {
		// This exact build failed already; a new upload or spec change retries.
		return "", setStatus(func(s *apiv1.FunctionStatus) {
			if s.Phase != apiv1.PhaseFailed {
				s.Phase, s.Message = apiv1.PhaseFailed, "the last build of this code failed; upload a fix"
			}
		})
	}
	if err := setStatus(func(s *apiv1.FunctionStatus) {
		s.Phase, s.Message = apiv1.PhaseBuilding, ""
		built(s, "False", apiv1.ReasonBuilding, "building the image of code "+spec.CodeSHA256[:min(12, len(spec.CodeSHA256))])
	}); err != nil {
		return "", err
	}
	res, err := c.pipeline.Build(ctx, req)
	if pe, ok := errors.AsType[*build.PendingError](err); ok {
		// No build slot free (this tenant's, or any): look again soon, without holding a worker.
		if err := setStatus(func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message = apiv1.PhaseBuilding, pe.Reason
			built(s, "False", apiv1.ReasonBuilding, pe.Reason)
		}); err != nil {
			return "", err
		}
		return "", requeueAfter(pe.RetryAfter)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err() // stopping: the next start builds again
		}
		user := build.IsUserError(err)
		if user {
			// This code will fail the same way again: do not retry it until it changes.
			b.FailedKey = k
			if err := p.db.PutBuild(ns, spec.Name, b); err != nil {
				return "", err
			}
		}
		if err := setStatus(func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message = apiv1.PhaseFailed, build.Message(err)
			built(s, "False", apiv1.ReasonFailed, build.Message(err))
		}); err != nil {
			return "", err
		}
		if user {
			p.log.Info("build failed", "namespace", ns, "function", spec.Name, "error", err)
			return "", nil
		}
		return "", fmt.Errorf("building %s/%s: %w", ns, spec.Name, err)
	}
	b.Key, b.Image, b.FailedKey, b.Images = res.Key, res.Image, "", append(b.Images, res.Image)
	if err := p.db.PutBuild(ns, spec.Name, b); err != nil {
		return "", err
	}
	now := time.Now().UTC().Truncate(time.Second)
	if err := setStatus(func(s *apiv1.FunctionStatus) {
		s.Image, s.LastBuiltAt, s.Message = res.Image, &now, "built; starting"
		built(s, "True", apiv1.ReasonBuilt, res.Image)
		s.Build = &apiv1.BuildInfo{DurationMS: res.Duration.Milliseconds(), DepsKey: res.DepsKey, DepsCached: res.DepsCached, DepsWarning: res.DepsWarning}
	}); err != nil {
		return "", err
	}
	c.enqueueJobsOf(ns, spec.Name)
	return res.Image, nil
}

// ensureRunning runs image as the function's container (a new one beside the old, which goes once
// /fn/ switched), or none when its http triggers switch it off.
func (c *controller) ensureRunning(ctx context.Context, ns string, spec api.FunctionSpec, image string, setStatus func(func(*apiv1.FunctionStatus)) error) error {
	p := c.p
	triggers, err := p.db.Triggers.List(ctx, ns)
	if err != nil {
		return err
	}
	grace := runspec.GraceSec(spec.TimeoutSec) + 3
	if off, names := runspec.DisabledBy(api.WireTriggers(triggers), spec.Name); off {
		p.run.Stop(ctx, ns, spec.Name, "", grace)
		c.scaler.forget(ns, spec.Name)
		return setStatus(func(s *apiv1.FunctionStatus) {
			s.Phase, s.Message = apiv1.PhaseReady, "stopped: disabled by trigger "+strings.Join(names, ", ")
			s.Replicas, s.DesiredReplicas = 0, 0
		})
	}
	f, err := p.runnerFunction(ns, spec, image)
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
		if err := setStatus(func(s *apiv1.FunctionStatus) {
			apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: apiv1.ConditionReady, Status: "False", Reason: apiv1.ReasonStarting,
				Message: "starting the first instance of " + image})
		}); err != nil {
			return err
		}
		inst, err := p.run.Serve(ctx, f)
		if err != nil {
			// The previous version, if any, keeps serving; the start is retried with backoff.
			events.Record(ctx, ns, spec.Name, apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, CodeSHA256: spec.CodeSHA256,
				Message: "start failed: " + err.Error()})
			if serr := setStatus(func(s *apiv1.FunctionStatus) {
				s.Phase, s.Message = apiv1.PhaseFailed, err.Error()
				apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: apiv1.ConditionReady, Status: "False", Reason: apiv1.ReasonFailed, Message: "start failed: " + err.Error()})
			}); serr != nil {
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
	return setStatus(func(s *apiv1.FunctionStatus) {
		s.Phase, s.Image = apiv1.PhaseReady, image
		apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: apiv1.ConditionReady, Status: "True", Reason: apiv1.ReasonReady, Message: "serving " + image})
		if s.Message != "" && !strings.HasPrefix(s.Message, scaleMessagePrefix) {
			s.Message = ""
		}
		s.Replicas, s.DesiredReplicas = ready, max(s.DesiredReplicas, ready+starting)
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
	if err == nil && b.Image == image {
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
	if errors.Is(err, api.ErrNotFound) {
		return nil // deleted meanwhile; the delete reconciles next
	}
	return err
}

// runnerFunction is what the runner runs for ns's function spec at image: in the tenant's own
// range of host uids (allocated on its first container), so that one tenant's processes never
// count against another's limits.
func (p *Platform) runnerFunction(ns string, spec api.FunctionSpec, image string) (runner.Function, error) {
	base, err := p.db.UIDBase(ns)
	return runner.Function{Namespace: ns, Name: spec.Name, Image: image, Env: spec.EnvVars, TimeoutSec: spec.TimeoutSec,
		MemoryMB: spec.MemoryMB, IDBase: base}, err
}

// built sets the Built condition.
func built(s *apiv1.FunctionStatus, status, reason, msg string) {
	apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: apiv1.ConditionBuilt, Status: status, Reason: reason, Message: msg})
}
