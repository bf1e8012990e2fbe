package local

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// Clock is the time cron triggers follow. Tests replace it so schedules fire without waiting.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to (`sless up --test-clock`).
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock starts at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now is the clock's time.
func (c *ManualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// scheduler fires cron triggers: each tick (every second, or when poked) every enabled cron trigger
// whose next time is due runs once, in job mode, with the cron event. Missed times collapse into one
// run of the latest (like a CronJob's startingDeadline with concurrencyPolicy Forbid).
type scheduler struct {
	c         *controller
	poke      chan chan struct{}
	mu        sync.Mutex
	firstSeen map[string]time.Time
	running   map[string]bool
	waiting   map[string]bool // for a free place under the namespace's quota (logged once)
}

func newScheduler(c *controller) *scheduler {
	return &scheduler{c: c, poke: make(chan chan struct{}), firstSeen: map[string]time.Time{}, running: map[string]bool{}, waiting: map[string]bool{}}
}

// Poke runs a scheduling pass now and returns when it has started any due runs.
func (p *Platform) Poke(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.ctrl.sched.poke <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *scheduler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pass(ctx)
		case done := <-s.poke:
			s.pass(ctx)
			close(done)
		}
	}
}

func (s *scheduler) pass(ctx context.Context) {
	p := s.c.p
	now := p.cfg.Clock.Now()
	all, err := p.db.Triggers.All()
	if err != nil {
		return
	}
	for ns, ts := range all {
		for _, t := range ts {
			if t.Spec.Type != apiv1.TriggerCron || (t.Spec.Enabled != nil && !*t.Spec.Enabled) {
				continue
			}
			sched, err := cron.ParseStandard(t.Spec.Schedule)
			if err != nil {
				continue
			}
			k := ns + "/" + t.Spec.Name
			s.mu.Lock()
			from, seen := s.firstSeen[k]
			if !seen {
				from = now
				s.firstSeen[k] = now
			}
			busy := s.running[k]
			s.mu.Unlock()
			if t.Status.LastScheduleTime != nil && t.Status.LastScheduleTime.After(from) {
				from = *t.Status.LastScheduleTime
			}
			var due time.Time
			for next := sched.Next(from); !next.After(now); next = sched.Next(next) {
				due = next
			}
			if due.IsZero() || busy {
				continue
			}
			s.fire(ctx, ns, t, due)
		}
	}
}

func (s *scheduler) fire(ctx context.Context, ns string, t objects.Trigger, due time.Time) {
	p := s.c.p
	name := t.Spec.Name
	k := ns + "/" + name
	dueUTC := due.UTC()
	// Recording the time consumes it: this run happens now or not at all.
	consume := func() error {
		return p.db.Triggers.UpdateStatus(ns, name, 0, func(st *apiv1.TriggerStatus) { st.LastScheduleTime = &dueUTC })
	}
	fn, err := p.db.Functions.Get(ctx, ns, t.Spec.FunctionRef)
	if err != nil || fn.Status.Image == "" {
		if consume() == nil {
			p.log.Warn("cron: function not built; skipped", "trigger", k, "function", t.Spec.FunctionRef)
		}
		return
	}
	rf, err := s.c.p.runnerFunction(ctx, ns, fn.Spec, fn.Status.Image)
	if err != nil {
		if consume() == nil {
			s.c.p.log.Error("cron run not started", "namespace", ns, "trigger", name, "error", err)
		}
		return
	}
	run := runner.Run{Container: fmt.Sprintf("sless-cron-%s-%s-%d", ns, name, due.Unix()), Role: runspec.RoleCron,
		Event: runspec.CronEvent(name, dueUTC), Function: rf}
	if err := p.run.Reserve(ctx, run); err != nil {
		if qe, ok := errors.AsType[*runner.QuotaError](err); ok && !qe.Never() {
			// Beyond the namespace's quota (runs at once, memory) the run waits: the time stays due
			// and is tried on every pass; times that pass meanwhile fold into one run of the latest
			// (as concurrencyPolicy Forbid does).
			s.mu.Lock()
			first := !s.waiting[k]
			s.waiting[k] = true
			s.mu.Unlock()
			if first {
				p.log.Warn("cron run waits for its namespace's quota", "trigger", k, "reason", qe.Error())
			}
			return
		}
		if consume() == nil {
			p.log.Warn("cron run not started", "trigger", k, "error", err)
		}
		return
	}
	if err := consume(); err != nil {
		p.run.Release(run.Container)
		return
	}
	s.mu.Lock()
	delete(s.waiting, k)
	s.running[k] = true
	s.mu.Unlock()
	s.c.runs.Add(1)
	go func() {
		defer s.c.runs.Done()
		defer s.c.enqueueWaiting(ns) // a place is free for the namespace's waiting jobs
		defer func() { s.mu.Lock(); delete(s.running, k); s.mu.Unlock() }()
		start := time.Now()
		out := p.run.RunOnce(ctx, run)
		if out.Interrupted {
			return
		}
		status := 200
		if !out.OK {
			status = 500
			p.log.Warn("cron run failed", "trigger", k, "message", out.Message)
		}
		p.db.Invocations.Record(context.Background(), ns, fn.Spec.Name, apiv1.Invocation{Time: start.UTC(), Status: status,
			DurationMS: float64(time.Since(start).Microseconds()) / 1000, RequestID: "cron-" + name + "-" + fmt.Sprint(due.Unix())})
	}()
}
