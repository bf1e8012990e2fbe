package runner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// Limits caps what one namespace's containers take on this host at once (the single host's
// counterpart of a tenant's ResourceQuota).
type Limits struct {
	// MemoryMB bounds the sum of the memory limits of a namespace's function, job and cron
	// containers; 0: no cap. A function's new container is counted in place of its old one,
	// which it replaces moments later (so an update never fails for the memory the old one holds).
	MemoryMB int
	// Runs bounds a namespace's job and cron containers at once; 0: no cap.
	Runs int
}

// QuotaError says why a container may not start now. It wraps objects.ErrQuotaExceeded.
type QuotaError struct {
	Namespace string
	// Runs: the namespace has Limit runs going. Otherwise memory: Used MiB of Limit are taken and
	// the container asks for Asked more.
	Runs               bool
	Used, Asked, Limit int
}

func (e *QuotaError) Error() string {
	switch {
	case e.Runs:
		return fmt.Sprintf("quota exceeded: namespace %s has %d job and cron runs going, the most it may have at once (the platform's --tenant-quota-runs); this one starts when one ends",
			e.Namespace, e.Limit)
	case e.Never():
		return fmt.Sprintf("quota exceeded: %d MiB of memory is more than namespace %s may use in all (%d MiB, the platform's --tenant-quota-memory); lower memory_mb",
			e.Asked, e.Namespace, e.Limit)
	}
	return fmt.Sprintf("quota exceeded: namespace %s's running containers have %d MiB of the %d MiB of memory it may use (the platform's --tenant-quota-memory) and this one needs %d MiB; stop or shrink a function, or wait for a run to end",
		e.Namespace, e.Used, e.Limit, e.Asked)
}

// Never reports whether the container alone is beyond the limit: waiting does not help.
func (e *QuotaError) Never() bool { return !e.Runs && e.Asked > e.Limit }

func (e *QuotaError) Unwrap() error { return objects.ErrQuotaExceeded }

// labelMemory records a container's memory limit (MiB), so that a listing after a restart counts
// it without inspecting each one.
const labelMemory = "sless.dev/memory-mb"

// booking is a container counted against its namespace's limits.
type booking struct {
	ns, fn string
	role   runspec.Role
	mb     int
	// version is a function container's version (versionOf). replaces: it is a new version's
	// first instance, which the containers of the function's other versions (on their way out)
	// are not counted against; every other container counts them all, so that versions switched
	// in a row cannot each hold the whole quota while the old ones finish.
	version  string
	replaces bool
	// started: its container runs (or ran); else it is reserved and about to start, and a
	// listing that does not show it yet must not drop it.
	started bool
}

func (b booking) run() bool { return b.role == runspec.RoleJob || b.role == runspec.RoleCron }

// ledger counts each namespace's containers. It is kept as containers start and are removed,
// and read from podman on first use (containers outlive sless up) and again, at most every
// refreshEvery, before it refuses a container (one may have exited or been removed by hand).
type ledger struct {
	mu        sync.Mutex
	limits    Limits
	list      func(context.Context) (map[string]booking, error)
	loaded    bool
	refreshed time.Time
	b         map[string]booking // by container name
}

const refreshEvery = 5 * time.Second

func newLedger(list func(context.Context) (map[string]booking, error)) *ledger {
	return &ledger{list: list, b: map[string]booking{}}
}

func (l *ledger) setLimits(lim Limits) {
	l.mu.Lock()
	l.limits = lim
	l.mu.Unlock()
}

// reserve books container name, or returns a *QuotaError. A booking of the same name is
// replaced (a leftover of that name is removed before its successor starts); keep leaves an
// existing one as it is (a run reserved before it was started).
func (l *ledger) reserve(ctx context.Context, name string, b booking, keep bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits == (Limits{}) {
		return nil
	}
	if _, ok := l.b[name]; ok && keep {
		return nil
	}
	if !l.loaded {
		if err := l.refresh(ctx); err != nil {
			return fmt.Errorf("counting the namespace's containers: %w", err)
		}
	}
	delete(l.b, name)
	err := l.check(b)
	if qe, ok := err.(*QuotaError); ok && !qe.Never() && time.Since(l.refreshed) >= refreshEvery {
		if rerr := l.refresh(ctx); rerr == nil {
			err = l.check(b)
		}
	}
	if err != nil {
		return err
	}
	l.b[name] = b
	return nil
}

// check says whether b fits beside the namespace's other bookings.
func (l *ledger) check(b booking) error {
	used, runs := 0, 0
	for _, o := range l.b {
		if o.ns != b.ns || (b.replaces && b.role == runspec.RoleFunction && o.role == runspec.RoleFunction && o.fn == b.fn && o.version != b.version) {
			continue // another namespace's, or the version this one replaces
		}
		used += o.mb
		if o.run() {
			runs++
		}
	}
	if b.run() && l.limits.Runs > 0 && runs >= l.limits.Runs {
		return &QuotaError{Namespace: b.ns, Runs: true, Limit: l.limits.Runs}
	}
	if l.limits.MemoryMB > 0 && used+b.mb > l.limits.MemoryMB {
		return &QuotaError{Namespace: b.ns, Used: used, Asked: b.mb, Limit: l.limits.MemoryMB}
	}
	return nil
}

// refresh replaces the started bookings by what podman says runs; reserved ones stay.
func (l *ledger) refresh(ctx context.Context) error {
	running, err := l.list(ctx)
	if err != nil {
		return err
	}
	for name, b := range l.b {
		if b.started {
			delete(l.b, name)
		}
	}
	for name, b := range running {
		if _, ok := l.b[name]; !ok {
			b.started = true
			l.b[name] = b
		}
	}
	l.loaded, l.refreshed = true, time.Now()
	return nil
}

// started marks name's container as running.
func (l *ledger) started(name string) {
	l.mu.Lock()
	if b, ok := l.b[name]; ok {
		b.started = true
		l.b[name] = b
	}
	l.mu.Unlock()
}

// note counts a container that runs already (adopted), without a check.
func (l *ledger) note(name string, b booking) {
	l.mu.Lock()
	if l.loaded {
		b.started = true
		l.b[name] = b
	}
	l.mu.Unlock()
}

func (l *ledger) release(name string) {
	l.mu.Lock()
	delete(l.b, name)
	l.mu.Unlock()
}

func (l *ledger) rename(from, to string) {
	l.mu.Lock()
	if b, ok := l.b[from]; ok {
		delete(l.b, from)
		l.b[to] = b
	}
	l.mu.Unlock()
}

// Fits reports whether one more container of ns/name's serving version fits its namespace's
// limits now, as far as the bookings know (the start checks again).
func (r *Runner) Fits(ns, name string) bool {
	r.mu.RLock()
	p := r.pools[ns+"/"+name]
	r.mu.RUnlock()
	if p == nil {
		return false
	}
	l := r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits.MemoryMB == 0 || l.check(booking{ns: ns, fn: name, role: runspec.RoleFunction, mb: p.fn.MemoryMB, version: p.version}) == nil
}

// SetLimits sets the caps per namespace (before the first container starts).
func (r *Runner) SetLimits(l Limits) { r.ledger.setLimits(l) }

// Reserve books a place for run under its namespace's limits, or returns a *QuotaError: a caller
// that reserves before it records the run as started can make it wait instead of fail. RunOnce
// takes the booking over; Release gives it back if the run is not started after all.
func (r *Runner) Reserve(ctx context.Context, run Run) error {
	return r.ledger.reserve(ctx, run.Container, runBooking(run), false)
}

// Release gives back what Reserve booked for container name.
func (r *Runner) Release(name string) { r.ledger.release(name) }

func runBooking(run Run) booking {
	return booking{ns: run.Function.Namespace, fn: run.Function.Name, role: run.Role, mb: run.Function.MemoryMB}
}

// running lists the containers of this instance that hold memory now, as bookings.
func (r *Runner) running(ctx context.Context) (map[string]booking, error) {
	cs, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]booking{}
	for _, c := range cs {
		role := runspec.Role(c.Labels[runspec.LabelRole])
		if c.Labels[runspec.LabelNamespace] == "" || (role != runspec.RoleFunction && role != runspec.RoleJob && role != runspec.RoleCron) {
			continue
		}
		if c.State != "running" && c.State != "paused" { // one being created is still booked as reserved

			continue
		}
		mb, err := strconv.Atoi(c.Labels[labelMemory])
		if err != nil {
			// Started by an earlier version, without the label: ask podman (bytes; 0 for none).
			s, ierr := r.pm.Run(ctx, "inspect", "--format", "{{.HostConfig.Memory}}", c.Name)
			n, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if ierr != nil || perr != nil {
				continue // gone meanwhile
			}
			mb = int(n >> 20)
		}
		out[c.Name] = booking{ns: c.Labels[runspec.LabelNamespace], fn: c.Labels[runspec.LabelFunction], role: role, mb: mb, version: versionOf(c.Name)}
	}
	return out, nil
}
