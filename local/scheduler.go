package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sless-dev/sless/api/apiv1"
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
	p         *Platform
	poke      chan chan struct{}
	mu        sync.Mutex
	firstSeen map[string]time.Time
	running   map[string]bool
}

func newScheduler(p *Platform) *scheduler {
	return &scheduler{p: p, poke: make(chan chan struct{}), firstSeen: map[string]time.Time{}, running: map[string]bool{}}
}

// Poke runs a scheduling pass now and returns when it has started any due runs.
func (p *Platform) Poke(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.sched.poke <- done:
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
	now := s.p.cfg.Clock.Now()
	all, err := s.p.triggers.all()
	if err != nil {
		return
	}
	for ns, ts := range all {
		for _, t := range ts {
			if t.Type != apiv1.TriggerCron || !t.IsEnabled() {
				continue
			}
			sched, err := cron.ParseStandard(t.Schedule)
			if err != nil {
				continue
			}
			k := ns + "/" + t.Name
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

func (s *scheduler) fire(ctx context.Context, ns string, t apiv1.Trigger, due time.Time) {
	p := s.p
	k := ns + "/" + t.Name
	dueUTC := due.UTC()
	if _, err := p.triggers.Update(ctx, ns, t.Name, func(tr *apiv1.Trigger) error {
		tr.Status.LastScheduleTime = &dueUTC
		return nil
	}); err != nil {
		return
	}
	fn, err := p.functions.Get(ctx, ns, t.FunctionRef)
	bs, _ := getBuild(p.db, ns, t.FunctionRef)
	if err != nil || bs.Image == "" {
		p.log.Warn("cron: function not built; skipped", "trigger", k, "function", t.FunctionRef)
		return
	}
	s.mu.Lock()
	s.running[k] = true
	s.mu.Unlock()
	env := runEnv(fn)
	env["JOB_MODE"] = "1"
	env["EVENT_JSON"] = cronEvent(t.Name, dueUTC)
	cname := fmt.Sprintf("sless-cron-%s-%s-%d", ns, t.Name, due.Unix())
	labels := map[string]string{labelInstance: p.instance, labelNamespace: ns, labelFunction: fn.Name, labelRole: "cron"}
	p.jobWG.Add(1)
	go func() {
		defer p.jobWG.Done()
		start := time.Now()
		ok, msg, interrupted := p.runOnce(ctx, containerSpec{name: cname, image: bs.Image, labels: labels, env: env, detach: true, memoryMB: fn.MemoryMB}, true)
		if interrupted {
			s.mu.Lock()
			delete(s.running, k)
			s.mu.Unlock()
			return
		}
		status := 200
		if !ok {
			status = 500
			p.log.Warn("cron run failed", "trigger", k, "message", msg)
		}
		p.inv.Record(context.Background(), ns, fn.Name, apiv1.Invocation{Time: start.UTC(), Status: status,
			DurationMS: float64(time.Since(start).Microseconds()) / 1000, RequestID: "cron-" + t.Name + "-" + fmt.Sprint(due.Unix())})
		s.mu.Lock()
		delete(s.running, k)
		s.mu.Unlock()
	}()
}
