package local

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
)

// key names one object to reconcile.
type key struct {
	kind     state.Kind
	ns, name string
}

// controller reconciles functions, triggers and jobs from a rate-limited work queue (client-go's):
// a key is never processed by two workers at once, one added while it is processed runs again
// afterwards, and a failed reconcile is retried with exponential backoff.
type controller struct {
	p        *Platform
	queue    workqueue.TypedRateLimitingInterface[key]
	pipeline *build.Pipeline
	sched    *scheduler
	scaler   *autoscaler
	wg       sync.WaitGroup
	// runs tracks job, cron and container-stopping goroutines that outlive a reconcile.
	runs sync.WaitGroup
}

// workers reconcile at once; builds are bounded by the pipeline, which never makes a worker wait
// for a build slot.
const workers = 4

// requeueAfter is a reconcile that is not done and not failed: look again after this long.
type requeueAfter time.Duration

func (d requeueAfter) Error() string { return "requeue after " + time.Duration(d).String() }

// resyncEvery reconciles everything again, so a container that died is noticed and replaced.
const resyncEvery = 30 * time.Second

// collectEvery is how often dependency layers no function uses are deleted (also at start).
const collectEvery = time.Hour

func newController(p *Platform) *controller {
	// Per key, lifecycle's retry backoff (as on Kubernetes: a failed build is retried on the same
	// schedule and within the same budget), under an overall 10/s, burst 100 bucket.
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](lifecycle.RetryBase, lifecycle.RetryMax),
		&workqueue.TypedBucketRateLimiter[key]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
	c := &controller{p: p, queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[key]{Name: "sless-up"})}
	c.sched = newScheduler(c)
	return c
}

// changed is the state's notification of a spec change.
func (c *controller) changed(k state.Kind, ns, name string) {
	switch k {
	case state.KindTrigger:
		c.queue.Add(key{state.KindTrigger, ns, name})
		// A trigger decides whether its function runs; a deleted one no longer says which.
		c.enqueueNamespace(ns)
	case state.KindSecret:
		// Its values are part of the run configuration of the functions that use it.
		c.enqueueUsers(ns, name)
	case state.KindFunction:
		c.queue.Add(key{k, ns, name})
		// A rabbitmq trigger consumes only while its function exists.
		c.enqueueTriggers(ns, func(t objects.Trigger) bool {
			return t.Spec.Type == apiv1.TriggerRabbitMQ && t.Spec.FunctionRef == name
		})
	default:
		c.queue.Add(key{k, ns, name})
	}
}

func (c *controller) enqueueNamespace(ns string) {
	fns, err := c.p.db.Functions.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, f := range fns {
		c.queue.Add(key{state.KindFunction, ns, f.Spec.Name})
	}
}

// enqueueUsers enqueues ns's functions that use secret.
func (c *controller) enqueueUsers(ns, secret string) {
	fns, err := c.p.db.Functions.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, f := range fns {
		if f.Spec.RefersTo(secret) {
			c.queue.Add(key{state.KindFunction, ns, f.Spec.Name})
		}
	}
	// A rabbitmq trigger's broker URL.
	c.enqueueTriggers(ns, func(t objects.Trigger) bool {
		if t.Spec.RabbitMQ == nil {
			return false
		}
		s, _, err := apiv1.SplitSecretRef(t.Spec.RabbitMQ.URLSecret)
		return err == nil && s == secret
	})
}

// enqueueTriggers enqueues ns's triggers that match.
func (c *controller) enqueueTriggers(ns string, match func(objects.Trigger) bool) {
	ts, err := c.p.db.Triggers.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, t := range ts {
		if match(t) {
			c.queue.Add(key{state.KindTrigger, ns, t.Spec.Name})
		}
	}
}

// enqueueKind enqueues every namespace's triggers that match.
func (c *controller) enqueueKind(match func(objects.Trigger) bool) {
	all, err := c.p.db.Triggers.All()
	if err != nil {
		return
	}
	for ns, ts := range all {
		for _, t := range ts {
			if match(t) {
				c.queue.Add(key{state.KindTrigger, ns, t.Spec.Name})
			}
		}
	}
}

func (c *controller) enqueueAll() error {
	fns, err := c.p.db.Functions.All()
	if err != nil {
		return err
	}
	ts, err := c.p.db.Triggers.All()
	if err != nil {
		return err
	}
	js, err := c.p.db.Jobs.All()
	if err != nil {
		return err
	}
	for ns, l := range fns {
		for _, o := range l {
			c.queue.Add(key{state.KindFunction, ns, o.Spec.Name})
		}
	}
	for ns, l := range ts {
		for _, o := range l {
			c.queue.Add(key{state.KindTrigger, ns, o.Spec.Name})
		}
	}
	for ns, l := range js {
		for _, o := range l {
			c.queue.Add(key{state.KindJob, ns, o.Spec.Name})
		}
	}
	return nil
}

// start recovers what the state says and runs the workers, the scheduler and the resync.
func (c *controller) start(ctx context.Context, pipeline *build.Pipeline) error {
	c.pipeline = pipeline
	for range workers {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.work(ctx) }()
	}
	if err := c.recover(ctx); err != nil {
		return err
	}
	c.wg.Add(4)
	go func() { defer c.wg.Done(); c.sched.run(ctx) }()
	go func() { defer c.wg.Done(); c.scaler.run(ctx) }()
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(collectEvery)
		defer t.Stop()
		for {
			if err := c.collectDeps(ctx); err != nil && ctx.Err() == nil {
				c.p.log.Warn("collecting dependency layers", "error", err)
			}
			c.p.run.CollectLogs() // stopped instances' logs older than an hour
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(resyncEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.enqueueAll()
			}
		}
	}()
	return nil
}

// stop ends the workers (after their current reconcile) and waits for runs to be left alone.
func (c *controller) stop() {
	c.queue.ShutDown()
	c.wg.Wait()
	c.runs.Wait()
}

func (c *controller) work(ctx context.Context) {
	for {
		k, quit := c.queue.Get()
		if quit {
			return
		}
		var err error
		switch k.kind {
		case state.KindFunction:
			err = c.reconcileFunction(ctx, k.ns, k.name)
		case state.KindTrigger:
			err = c.reconcileTrigger(ctx, k.ns, k.name)
		case state.KindJob:
			err = c.reconcileJob(ctx, k.ns, k.name)
		}
		var again requeueAfter
		switch {
		case errors.As(err, &again):
			c.queue.Forget(k)
			c.queue.AddAfter(k, time.Duration(again))
		case err == nil || errors.Is(err, objects.ErrNotFound):
			c.queue.Forget(k)
		case ctx.Err() == nil:
			c.p.log.Error("reconcile", "kind", k.kind, "namespace", k.ns, "name", k.name, "error", err)
			c.queue.AddRateLimited(k)
		}
		c.queue.Done(k)
	}
}
