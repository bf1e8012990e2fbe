package autoscale

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// epsilon absorbs the rounding of averages of averages, so that a load of exactly n × concurrency
// asks for n instances, not n+1.
const epsilon = 1e-9

// Instance is one ready instance as the proxies see it.
type Instance struct {
	// ID names the instance to the backend: a container name or a pod name.
	ID string
	// InFlight is the requests being served by it now, summed over the proxy replicas.
	InFlight int
	// LastActive is the last time a request was in flight or held on it: the latest over all
	// proxy replicas. Zero means never seen busy.
	LastActive time.Time
}

// Sample is what the proxies report for one function at one moment, each count summed over the
// proxy replicas (each replica knows only the requests it serves and holds).
type Sample struct {
	// InFlight is the requests being served by the function's instances.
	InFlight int
	// Held is the requests waiting for an instance: none is ready, or all are at their concurrency.
	Held int
}

// Input is what the backend knows of one function when it asks for a decision.
type Input struct {
	Spec Spec
	// Ready is the instances that are ready now.
	Ready []Instance
	// Starting is how many instances were asked for and are not ready yet. The decider never
	// stops them: it does not know their names.
	Starting int
	// Held is the requests held right now, summed over the proxy replicas. With Ready's InFlight it
	// is what "right now" means to the rules that look at the present rather than at the windows.
	Held int
}

// Decision is what the backend should do for one function.
type Decision struct {
	// Desired is how many instances, ready and starting, the function should have once the Stop
	// instances are gone. The backend stops Stop, then starts instances, or cancels ones still
	// starting, until it has Desired.
	Desired int
	// Stop names ready instances to stop now, idle longest first.
	Stop []string
	// Panicking says the panic window is in charge: nothing is scaled down.
	Panicking bool
	// Reason is a short explanation for logs and status.
	Reason string
}

// Decider keeps the load windows of many functions, keyed by a string such as "ns/name", and turns
// them into decisions. It is safe for concurrent use.
//
// The rules, per Decide:
//   - want = ceil(stable-window average of in flight + held / concurrency);
//   - panic mode starts when the panic-window average reaches the panic threshold × capacity
//     (capacity = (ready + starting) × concurrency; with no instance at all, any load: a cold start)
//     and ends once a whole stable window has passed without that; while panicking, want is at
//     least ceil(panic-window average / concurrency) and never below ready + starting;
//   - with anything in flight or held right now, want is at least 1;
//   - want is clamped to [min_replicas, max_replicas];
//   - scale-up: Desired = want when want exceeds ready + starting;
//   - scale-down only by idleness: a ready instance with nothing in flight whose idle time reaches
//     IdleTimeout is a candidate, and Desired = max(want, ready + starting − candidates), the
//     candidates idle longest going first. Nothing is stopped while panicking.
//
// An instance's idle time runs from its LastActive, or from when this decider first saw its ID if
// that is later: a restarted decider sees every instance as new and so stops nothing for an
// IdleTimeout, and with empty windows it wants no more than is running, so a restart scales nothing
// to zero or to max. An instance beyond want that still has requests stays until it has been idle
// for IdleTimeout: the scale-down works as well as the proxy packs requests onto few instances and
// lets the spare ones go idle. Because Desired never drops below want, the last instance goes only
// when the stable window is empty too, so an IdleTimeout shorter than the stable window stops
// instances no earlier than the stable window allows (an instance stopped sooner would be asked for
// again on the next tick). The one exception to "only idle instances are stopped" is a function
// with more ready instances than max_replicas (the setting was lowered): the excess is stopped,
// idle ones first, then the least busy.
type Decider struct {
	o   *options
	mu  sync.Mutex
	fns map[string]*function
}

// function is one function's state. Its memory is bounded: one bucket per tick of the stable
// window, and one entry per instance the last Decide saw ready.
type function struct {
	buckets   []bucket
	firstSeen map[string]time.Time
	panicking bool
	// overAt is the last time the panic threshold was met.
	overAt time.Time
}

// bucket holds the samples recorded during one tick; its load is their mean, since each sample is a
// level (requests in flight), not a count of events.
type bucket struct {
	tick int64
	sum  float64
	n    int
}

// New returns a decider with the defaults of issue 16 unless options change them.
func New(opts ...Option) (*Decider, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, err
	}
	return &Decider{o: o, fns: map[string]*function{}}, nil
}

// Record adds a sample of the function's load at the current time. Call it at least once a tick
// while the function has instances or held requests (a sample of zeros is a sample): a tick without
// one is left out of the averages, unknown rather than idle. Faster calls are averaged per tick.
func (d *Decider) Record(key string, s Sample) {
	now := d.o.clock()
	load := float64(max(s.InFlight, 0) + max(s.Held, 0))
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.function(key)
	if f.buckets == nil {
		f.buckets = make([]bucket, d.o.stableTicks)
	}
	t := d.tickOf(now)
	b := &f.buckets[mod(t, int64(len(f.buckets)))]
	switch {
	case b.n == 0 || b.tick < t:
		*b = bucket{tick: t, sum: load, n: 1}
	case b.tick == t:
		b.sum += load
		b.n++
	}
	// b.tick > t: the clock went back past a newer bucket; the sample is dropped.
}

// Forget drops everything kept for the function: call it when the function is deleted.
func (d *Decider) Forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.fns, key)
}

// Decide returns what the backend should do for the function now. Call it about once a tick: panic
// mode starts and ends only in Decide. Out-of-range settings in in.Spec are forced into range (check
// specs where they are accepted, with Spec.Validate).
func (d *Decider) Decide(key string, in Input) Decision {
	now := d.o.clock()
	spec := in.Spec.normalized()
	ready := len(in.Ready)
	current := ready + max(in.Starting, 0)
	busyNow := max(in.Held, 0)
	for _, i := range in.Ready {
		busyNow += max(i.InFlight, 0)
	}
	conc := float64(spec.Concurrency)

	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.function(key)
	stable := d.average(f, now, d.o.stableTicks)
	panicAvg := d.average(f, now, d.o.panicTicks)

	over := panicAvg >= d.o.threshold*float64(current)*conc-epsilon
	if current == 0 {
		over = panicAvg > 0 || busyNow > 0
	}
	switch {
	case over:
		f.panicking, f.overAt = true, now
	case f.panicking && now.Sub(f.overAt) >= d.o.stable:
		f.panicking = false
	}

	want := instancesFor(stable, conc)
	if f.panicking {
		want = max(want, instancesFor(panicAvg, conc), current)
	}
	if busyNow > 0 {
		want = max(want, 1)
	}
	want = min(max(want, spec.MinReplicas), spec.MaxReplicas)

	idle := f.idle(now, in.Ready, spec.IdleTimeout)
	var desired int
	switch {
	case want > current || f.panicking:
		// While panicking want is at least current, unless max_replicas is now below it.
		desired = want
	default:
		desired = min(max(want, current-len(idle)), spec.MaxReplicas)
	}

	var stop []string
	n := min(current-desired, len(idle))
	for _, i := range idle[:max(n, 0)] {
		stop = append(stop, i.ID)
	}
	// Only above max_replicas can more be ready than Desired once the idle ones are gone.
	if forced := ready - len(stop) - desired; forced > 0 {
		stop = append(stop, leastBusy(in.Ready, stop, f.firstSeen, forced)...)
	}

	return Decision{
		Desired:   desired,
		Stop:      stop,
		Panicking: f.panicking,
		Reason:    d.reason(f.panicking, current, desired, len(stop), spec, stable, panicAvg, busyNow),
	}
}

func (d *Decider) reason(panicking bool, current, desired, stopped int, spec Spec, stable, panicAvg float64, busyNow int) string {
	var verb string
	switch {
	case desired > current && current == 0:
		verb = "cold start"
	case desired > current:
		verb = "scale up"
	case desired < current && current > spec.MaxReplicas:
		verb = "above max_replicas"
	case stopped > 0:
		verb = fmt.Sprintf("%d idle for %v", stopped, spec.IdleTimeout)
	default:
		verb = "steady"
	}
	if panicking {
		verb += " (panic)"
	}
	return fmt.Sprintf("%s: load %.1f over %v, %.1f over %v, %d now; concurrency %d",
		verb, stable, d.o.stable, panicAvg, d.o.panic, busyNow, spec.Concurrency)
}

func (d *Decider) function(key string) *function {
	f, ok := d.fns[key]
	if !ok {
		f = &function{firstSeen: map[string]time.Time{}}
		d.fns[key] = f
	}
	return f
}

func (d *Decider) tickOf(t time.Time) int64 {
	ns, tick := t.UnixNano(), int64(d.o.tick)
	q := ns / tick
	if ns%tick < 0 {
		q--
	}
	return q
}

// average is the mean load of the ticks of the last `ticks` (this one included) that have samples;
// 0 without any.
func (d *Decider) average(f *function, now time.Time, ticks int64) float64 {
	t := d.tickOf(now)
	var sum float64
	var n int
	for _, b := range f.buckets {
		if b.n > 0 && b.tick <= t && b.tick > t-ticks {
			sum += b.sum / float64(b.n)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// idle updates which instances the decider has seen and returns the ready instances that may be
// stopped, idle longest first.
func (f *function) idle(now time.Time, ready []Instance, timeout time.Duration) []Instance {
	seen := make(map[string]time.Time, len(ready))
	for _, i := range ready {
		t, ok := f.firstSeen[i.ID]
		if !ok {
			t = now
		}
		seen[i.ID] = t
	}
	// Instances no longer ready are dropped: one that comes back counts as new, which only delays
	// its stop.
	f.firstSeen = seen

	var idle []Instance
	for _, i := range ready {
		if i.InFlight <= 0 && now.Sub(idleSince(i, seen)) >= timeout {
			idle = append(idle, i)
		}
	}
	slices.SortStableFunc(idle, func(a, b Instance) int {
		return cmp.Or(idleSince(a, seen).Compare(idleSince(b, seen)), cmp.Compare(a.ID, b.ID))
	})
	return idle
}

// idleSince is when the instance was last busy, as far as this decider can vouch: never before it
// first saw the instance.
func idleSince(i Instance, firstSeen map[string]time.Time) time.Time {
	if t := firstSeen[i.ID]; i.LastActive.Before(t) {
		return t
	}
	return i.LastActive
}

// leastBusy picks n ready instances not already in stop: fewest in flight first, then idle longest.
func leastBusy(ready []Instance, stop []string, firstSeen map[string]time.Time, n int) []string {
	var rest []Instance
	for _, i := range ready {
		if !slices.Contains(stop, i.ID) {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.InFlight, b.InFlight),
			idleSince(a, firstSeen).Compare(idleSince(b, firstSeen)), cmp.Compare(a.ID, b.ID))
	})
	var ids []string
	for _, i := range rest[:min(n, len(rest))] {
		ids = append(ids, i.ID)
	}
	return ids
}

// instancesFor is how many instances a load needs at the given concurrency.
func instancesFor(load, concurrency float64) int {
	if load <= 0 {
		return 0
	}
	return int(math.Ceil(load/concurrency - epsilon))
}

func mod(a, b int64) int64 {
	return ((a % b) + b) % b
}
