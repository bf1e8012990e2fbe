package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// reconcileTrigger writes a trigger's status: active when enabled and, for a cron trigger, when
// its function has an image to run (as the Kubernetes backend reports it).
func (c *controller) reconcileTrigger(ctx context.Context, ns, name string) error {
	t, err := c.p.db.Triggers.Get(ctx, ns, name)
	if errors.Is(err, objects.ErrNotFound) {
		c.p.mq.stop(ns, name)
		return nil
	}
	if err != nil {
		return err
	}
	if t.Spec.Type == apiv1.TriggerRabbitMQ {
		return c.p.mq.reconcile(ctx, ns, t)
	}
	// The function's build enqueues its cron triggers (enqueueJobsOf).
	fn, err := c.p.db.Functions.Get(ctx, ns, t.Spec.FunctionRef)
	active := lifecycle.TriggerActive(objects.WireTrigger(t), err == nil && fn.Status.Image != "")
	return ignoreNotFound(c.p.db.Triggers.UpdateStatus(ns, name, t.Generation, func(s *apiv1.TriggerStatus) { s.Active = active }))
}

// enqueueJobsOf reconciles the jobs and triggers of a function that just got a new image.
func (c *controller) enqueueJobsOf(ns, fname string) {
	if js, err := c.p.db.Jobs.List(context.Background(), ns); err == nil {
		for _, j := range js {
			if j.Spec.FunctionRef == fname {
				c.queue.Add(key{state.KindJob, ns, j.Spec.Name})
			}
		}
	}
	if ts, err := c.p.db.Triggers.List(context.Background(), ns); err == nil {
		for _, t := range ts {
			if t.Spec.FunctionRef == fname {
				c.queue.Add(key{state.KindTrigger, ns, t.Spec.Name})
			}
		}
	}
}

func jobContainer(ns, job string, runID int64) string {
	return fmt.Sprintf("sless-job-%s-%s-%d", ns, job, runID)
}

// reconcileJob starts a run when run_id is above the last run (the seed's rule; 0 never runs).
func (c *controller) reconcileJob(ctx context.Context, ns, jname string) error {
	p := c.p
	job, err := p.db.Jobs.Get(ctx, ns, jname)
	if errors.Is(err, objects.ErrNotFound) {
		p.run.RemoveWhere(ctx, 5, func(ct runner.Container) bool {
			return ct.Labels[runspec.LabelRole] == string(runspec.RoleJob) && ct.Labels[runspec.LabelNamespace] == ns && ct.Labels[runspec.LabelJob] == jname
		})
		return nil
	}
	if err != nil {
		return err
	}
	spec, gen := job.Spec, job.Generation
	apply := func(e lifecycle.JobEvent) error {
		return ignoreNotFound(p.db.Jobs.UpdateStatus(ns, jname, gen, func(s *apiv1.JobStatus) { *s = lifecycle.NextJob(*s, e, time.Now()) }))
	}
	switch lifecycle.NextRun(spec.RunID, job.Status) {
	case lifecycle.JobSkip:
		return apply(lifecycle.RunSkipped{})
	case lifecycle.JobNothing:
		// This run happened (or runs): nothing to do but say the spec is seen.
		return ignoreNotFound(p.db.Jobs.UpdateStatus(ns, jname, gen, func(*apiv1.JobStatus) {}))
	}
	fn, err := p.db.Functions.Get(ctx, ns, spec.FunctionRef)
	if err != nil || fn.Status.Image == "" {
		return apply(lifecycle.RunWaiting{Message: fmt.Sprintf("waiting for function %q to be built", spec.FunctionRef)})
	}
	rf, err := p.runnerFunction(ctx, ns, fn.Spec, fn.Status.Image)
	if ms, ok := errors.AsType[*missingSecret](err); ok {
		return apply(lifecycle.RunRefused{RunID: spec.RunID, Message: "not started: " + ms.message})
	}
	if err != nil {
		return err
	}
	runID := spec.RunID
	run := runner.Run{Container: jobContainer(ns, jname, runID), Role: runspec.RoleJob, Job: jname, Event: spec.EventJSON, Function: rf}
	// Booked before the run is recorded as started: a run beyond the namespace's quota (runs at
	// once, memory) waits as Pending, as a Job's pod waits for quota on Kubernetes.
	if err := p.run.Reserve(ctx, run); err != nil {
		qe, ok := errors.AsType[*runner.QuotaError](err)
		if !ok {
			return err
		}
		if qe.Never() {
			// Waiting would not help: this run is over; a higher run_id tries again.
			return apply(lifecycle.RunRefused{RunID: runID, Message: qe.Error()})
		}
		if err := apply(lifecycle.RunWaiting{Message: "waiting to start: " + qe.Error()}); err != nil {
			return err
		}
		return requeueAfter(quotaRecheck) // a run that ends enqueues the waiting ones sooner
	}
	if err := apply(lifecycle.RunStarted{RunID: runID}); err != nil {
		p.run.Release(run.Container)
		return err
	}
	c.runs.Add(1)
	go func() {
		defer c.runs.Done()
		if out := p.run.RunOnce(ctx, run); !out.Interrupted {
			c.finishJob(ns, jname, runID, out)
		}
	}()
	return nil
}

// quotaRecheck is how often a job waiting for its namespace's quota looks again (memory that a
// function's container frees is not announced).
const quotaRecheck = 5 * time.Second

// enqueueWaiting reconciles ns's jobs that wait to start: a run of the namespace ended.
func (c *controller) enqueueWaiting(ns string) {
	js, err := c.p.db.Jobs.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, j := range js {
		if j.Status.Phase == apiv1.JobPending && j.Spec.RunID > j.Status.LastRunID {
			c.queue.Add(key{state.KindJob, ns, j.Spec.Name})
		}
	}
}

func (c *controller) finishJob(ns, jname string, runID int64, out runner.Outcome) {
	c.p.db.Jobs.UpdateStatus(ns, jname, 0, func(s *apiv1.JobStatus) {
		*s = lifecycle.NextJob(*s, lifecycle.RunFinished{RunID: runID, OK: out.OK, Message: out.Message}, time.Now())
	})
	c.enqueueWaiting(ns)
}
