package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/runspec"
)

// autoscaler starts and stops each serving function's containers from the load /fn/ sees, with
// the decider the Kubernetes backend uses too (autoscale): every tick, and at once when /fn/ holds
// a request (Poke). A version is first started by the controller (ensureRunning), which then
// leaves the count to it. Starts run in the background, so a slow one never delays the decisions
// of other functions; a stop takes the container out of /fn/ first, then gives it the function's
// grace to finish what it serves.
type autoscaler struct {
	c       *controller
	decider *autoscale.Decider
	tick    time.Duration
	pokes   chan string

	mu    sync.Mutex
	loads func() []activator.Load
	// desired is the last decision per function ("ns/name"), for its status.
	desired map[string]int
	// limited is the functions whose last start a quota refused (the status message says so).
	limited map[string]string
	// dirty is the functions whose status to write: a writer of its own does it, so that a slow
	// disk (the state file's fsync) never delays a decision.
	dirty map[string]bool
	kick  chan struct{}
	// poked is the functions with a poke in the channel.
	poked map[string]bool
}

func newAutoscaler(c *controller, opts []autoscale.Option, tick time.Duration) (*autoscaler, error) {
	d, err := autoscale.New(append([]autoscale.Option{autoscale.WithTick(tick)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &autoscaler{c: c, decider: d, tick: tick, pokes: make(chan string, 64), desired: map[string]int{}, limited: map[string]string{},
		dirty: map[string]bool{}, kick: make(chan struct{}, 1), poked: map[string]bool{}}, nil
}

// Poke asks for a look at ns/name now (/fn/ holds a request for it). It never blocks.
func (a *autoscaler) Poke(ns, name string) { a.poke(ns, name) }

func (a *autoscaler) poke(ns, name string) {
	k := ns + "/" + name
	a.mu.Lock()
	if a.poked[k] {
		a.mu.Unlock()
		return // a look is pending already: one busy function cannot crowd out another's
	}
	a.poked[k] = true
	a.mu.Unlock()
	select {
	case a.pokes <- k:
	default: // 64 functions wait for a look: the next tick comes soon
		a.mu.Lock()
		delete(a.poked, k)
		a.mu.Unlock()
	}
}

func (a *autoscaler) setLoads(f func() []activator.Load) {
	a.mu.Lock()
	a.loads = f
	a.mu.Unlock()
}

func (a *autoscaler) currentLoads() map[string]activator.Load {
	a.mu.Lock()
	f := a.loads
	a.mu.Unlock()
	out := map[string]activator.Load{}
	if f == nil {
		return out
	}
	for _, l := range f() {
		out[l.Namespace+"/"+l.Name] = l
	}
	return out
}

func (a *autoscaler) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.writeStatuses(ctx) }()
	defer wg.Wait()
	t := time.NewTicker(a.tick)
	defer t.Stop()
	var pruning sync.Mutex
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case k := <-a.pokes:
			a.mu.Lock()
			delete(a.poked, k)
			a.mu.Unlock()
			a.scale(ctx, k, a.currentLoads()[k])
		case <-t.C:
			loads := a.currentLoads()
			for _, k := range a.c.p.run.Serves() {
				a.scale(ctx, k, loads[k])
			}
			if time.Since(lastPrune) >= pruneEvery && pruning.TryLock() {
				lastPrune = time.Now()
				wg.Add(1)
				go func() { // one podman listing: off the decision loop
					defer wg.Done()
					defer pruning.Unlock()
					if gone := a.c.p.run.PruneAll(ctx); len(gone) > 0 {
						a.c.p.log.Warn("instances stopped running; no longer routed to", "containers", gone)
					}
				}()
			}
		}
	}
}

// pruneEvery is how often the containers are listed to find instances that died.
const pruneEvery = 5 * time.Second

// scale decides one function's instances and applies the decision.
func (a *autoscaler) scale(ctx context.Context, key string, load activator.Load) {
	p := a.c.p
	ns, name, _ := strings.Cut(key, "/")
	obj, err := p.db.Functions.Get(ctx, ns, name)
	if err != nil {
		a.decider.Forget(key)
		return
	}
	if p.run.Serving(ns, name) == "" {
		return // nothing started yet, or an earlier sless up's container until its replacement is up
	}
	a.mu.Lock()
	_, limited := a.limited[key]
	a.mu.Unlock()
	if limited && p.run.Fits(ns, name) {
		// Memory was freed: the next start may succeed, so /fn/ holds requests again.
		a.mu.Lock()
		delete(a.limited, key)
		a.mu.Unlock()
		a.statusChanged(key)
		limited = false
	}
	a.decider.Record(key, autoscale.Sample{InFlight: load.InFlight, Held: load.Held})
	spec := obj.Spec.WithScaleDefaults()
	in := autoscale.Input{Held: load.Held, Spec: autoscale.Spec{MinReplicas: spec.MinReplicas, MaxReplicas: spec.MaxReplicas,
		Concurrency: spec.Concurrency, IdleTimeout: time.Duration(spec.IdleTimeoutSec) * time.Second}}
	active := map[string]activator.InstanceLoad{}
	for _, il := range load.Instances {
		active[il.ID] = il
	}
	for _, id := range p.run.ReadyNames(ns, name) {
		il := active[id]
		in.Ready = append(in.Ready, autoscale.Instance{ID: id, InFlight: il.InFlight, LastActive: il.LastActive})
	}
	_, in.Starting = p.run.Scale(ns, name)
	d := a.decider.Decide(key, in)

	grace := runspec.GraceSec(spec.TimeoutSec) + 3
	for _, id := range d.Stop {
		p.run.Drain(ns, name, id) // out of /fn/ at once; the container finishes what it serves
		a.c.runs.Add(1)
		go func() {
			defer a.c.runs.Done()
			if err := p.run.Remove(context.WithoutCancel(ctx), id, grace); err != nil {
				p.log.Warn("stopping an instance", "namespace", ns, "function", name, "container", id, "error", err)
			}
		}()
	}
	current := len(in.Ready) - len(d.Stop) + in.Starting
	now := time.Now()
	starts := max(d.Desired-current, 0)
	if limited {
		starts = 0 // refused until one fits (checked above): no start attempt per held request
	}
	for range starts {
		// Counted as starting before the next decision; started in the background.
		start, err := p.run.BeginInstance(ns, name, now)
		if err != nil {
			break
		}
		a.c.runs.Add(1)
		go func() {
			defer a.c.runs.Done()
			a.started(ctx, ns, name, start(ctx))
		}()
	}
	if d.Desired <= current && p.run.NeedsSpare(ns, name) {
		// The next instance is created now, while nothing starts, and only started when needed.
		a.c.runs.Add(1)
		go func() {
			defer a.c.runs.Done()
			if err := p.run.PrepareSpare(ctx, ns, name); err != nil && ctx.Err() == nil {
				p.log.Warn("preparing the next instance", "namespace", ns, "function", name, "error", err)
			}
		}()
	}
	if starts > 0 || len(d.Stop) > 0 {
		p.log.Info("scaled", "namespace", ns, "function", name, "from", len(in.Ready)+in.Starting, "to", d.Desired, "reason", d.Reason)
	}
	a.mu.Lock()
	a.desired[key] = d.Desired
	a.mu.Unlock()
	a.statusChanged(key)
}

// started hears how a start of one instance of ns/name ended; one a quota refused is said in the
// status message, and /fn/ answers 429 instead of holding requests no instance will take.
func (a *autoscaler) started(ctx context.Context, ns, name string, err error) {
	p := a.c.p
	key := ns + "/" + name
	var qe *runner.QuotaError
	limited := errors.As(err, &qe)
	a.mu.Lock()
	_, was := a.limited[key]
	if limited {
		// Cleared only by the tick's Fits: a start that began before the refusal and succeeds
		// after it says nothing about the next one.
		a.limited[key] = qe.Error()
	}
	a.mu.Unlock()
	switch {
	case err == nil:
	case limited:
		if !was {
			p.log.Info("scale-up stopped by the quota", "namespace", ns, "function", name, "error", err)
		}
	case ctx.Err() == nil:
		p.log.Warn("starting an instance", "namespace", ns, "function", name, "error", err)
	}
	a.statusChanged(key)
	// A failed start is tried again at the next decision that asks for it.
}

// statusChanged asks the status writer to look at the function.
func (a *autoscaler) statusChanged(key string) {
	a.mu.Lock()
	a.dirty[key] = true
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *autoscaler) writeStatuses(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		a.mu.Lock()
		keys := a.dirty
		a.dirty = map[string]bool{}
		a.mu.Unlock()
		for k := range keys {
			a.writeStatus(k)
		}
	}
}

// writeStatus puts the function's instance counts (and a quota's refusal) into its status; the
// state writes nothing when they did not change.
func (a *autoscaler) writeStatus(key string) {
	p := a.c.p
	ns, name, _ := strings.Cut(key, "/")
	ready, starting := p.run.Scale(ns, name)
	a.mu.Lock()
	desired, known := a.desired[key]
	limited, isLimited := a.limited[key]
	a.mu.Unlock()
	if !known {
		desired = ready + starting
	}
	msg := ""
	if isLimited {
		msg = fmt.Sprintf("scale-up stopped at %d instances by the namespace's quota (sless up --tenant-quota-memory): %s", ready, limited)
	}
	// /fn/ answers 429 at once instead of holding a request no instance will take (ScaleLimited).
	ignoreNotFound(p.db.Functions.UpdateStatus(ns, name, 0, func(s *lifecycle.FunctionStatus) {
		*s = lifecycle.Next(*s, lifecycle.Scaled{Replicas: ready, Desired: desired, Limited: msg}, time.Now())
	}))
}

func (a *autoscaler) isLimited(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.limited[key]
	return ok
}

// forget drops what the autoscaler keeps of a function that no longer serves.
func (a *autoscaler) forget(ns, name string) {
	key := ns + "/" + name
	a.decider.Forget(key)
	a.mu.Lock()
	delete(a.desired, key)
	delete(a.limited, key)
	a.mu.Unlock()
}
