package activator

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// Instance is one instance of a function as its backend reports it.
type Instance struct {
	// ID names it (a container or pod name); the same instance keeps its ID.
	ID string
	// URL is where it listens; nil while it has no address yet.
	URL *url.URL
	// Ready is the backend's own verdict (the runner's health wait, the kubelet's readiness).
	// An instance that is not Ready but has an address is probed by the activator itself.
	Ready bool
	// Requested is when the backend decided to start it, if it knows (zero if not): the
	// "decision" part of a cold request's timing.
	Requested time.Time
}

// Source lists a function's instances: ready ones, and those starting. An instance being removed
// is not listed (it then receives no new requests and finishes the ones it has).
type Source interface {
	Instances(ctx context.Context, ns, name string) ([]Instance, error)
}

// ScaleLimiter is a Source that also knows when a function can get no more instances now (the
// tenant's quota stopped its scale-up): requests held while it has none ready or starting are then
// answered (ErrScaleLimited) instead of waiting for one that will not come.
type ScaleLimiter interface {
	ScaleLimited(ctx context.Context, ns, name string) bool
}

// Scaler is told when requests of a function wait for an instance: the decider should look now,
// not at its next tick. It must not block.
type Scaler interface {
	Poke(ns, name string)
}

// Limits are a function's per-instance concurrency (hard: no instance is sent more at once) and
// how many requests may wait for one.
type Limits struct {
	Concurrency int
	MaxHeld     int
	// NoStart: nothing can be started for the function now (no version is built), so a request
	// finding no instance fails at once (ErrNoInstance) instead of waiting.
	NoStart bool
	// ScaleLimited: the backend cannot start more instances now (the tenant's quota), so a
	// request that finds none ready or starting is refused at once (ErrThrottled) instead of
	// held for one that will not come.
	ScaleLimited bool
}

var (
	// ErrThrottled: every instance is at its concurrency and the hold queue is full.
	ErrThrottled = errors.New("every instance is busy and the hold queue is full")
	// ErrNoInstance: no instance can serve and the backend cannot start one (no Scaler).
	ErrNoInstance = errors.New("no instance is running")
	// ErrScaleLimited: a held request's function has no instance and the backend may start none
	// now (ScaleLimiter).
	ErrScaleLimited = errors.New("no instance is running and the quota allows no more")
)

// Option configures New.
type Option func(*Activator)

// WithScaler pokes s whenever a request has to wait. Without one, a function with no instance
// fails at once (ErrNoInstance) instead of waiting.
func WithScaler(s Scaler) Option { return func(a *Activator) { a.scaler = s } }

// WithProbeInterval is how often starting instances are probed and the source asked again while
// requests wait (default 20 ms).
func WithProbeInterval(d time.Duration) Option { return func(a *Activator) { a.probeEvery = d } }

// WithProbeClient sets the client of health probes (default: 500 ms timeout, no proxy).
func WithProbeClient(c *http.Client) Option { return func(a *Activator) { a.probe = c } }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(a *Activator) { a.now = now } }

// HealthPath is what a starting instance answers 200 on once it can serve (runtimes/README.md).
const HealthPath = "/health"

// Activator routes requests to instances within their concurrency, holds those that find no
// capacity until an instance has it, and counts the load the decider scales by.
type Activator struct {
	src        Source
	scaler     Scaler
	probe      *http.Client
	probeEvery time.Duration
	now        func() time.Time

	mu  sync.RWMutex
	fns map[string]*function
}

// New makes an Activator on src.
func New(src Source, opts ...Option) *Activator {
	a := &Activator{src: src, probeEvery: 20 * time.Millisecond, now: time.Now, fns: map[string]*function{}}
	for _, o := range opts {
		o(a)
	}
	if a.probe == nil {
		a.probe = &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	}
	return a
}

// function is the activator's state of one function.
type function struct {
	ns, name string

	mu       sync.Mutex
	ready    []*instance // routable, in the order they became ready (load packs onto the first)
	starting map[string]*starting
	probing  map[string]bool
	waiters  []*waiter
	running  bool // a refresh loop runs
	lim      Limits
}

// starting is an instance listed but not ready yet.
type starting struct {
	Instance
	listed time.Time // first listed with an address (zero while it has none)
}

type instance struct {
	id  string
	url *url.URL // never changes
	// When the backend asked for it, when the source first listed it with an address and when it
	// became routable (health check passed or the backend said so): set once, never changed.
	requested, listed, readyAt time.Time

	inFlight   int
	lastActive time.Time
	gone       bool // no longer listed: takes no new requests
}

type waiter struct {
	ch chan *instance // buffered 1: a grant never blocks
}

// Lease is one request's slot on an instance.
type Lease struct {
	f    *function
	a    *Activator
	in   *instance
	once sync.Once
	// Held is how long the request waited for its slot (0 when it got one at once); Cold is true
	// when no instance was ready as it arrived (a cold start).
	Held time.Duration
	Cold bool
	// heldAt is when the request began to wait (zero: it never did).
	heldAt time.Time
}

// Timing is where a held request's wait went. Zero times are unknown.
type Timing struct {
	// HeldAt is when the request began to wait, Granted when it got its slot (it is forwarded
	// then).
	HeldAt, Granted time.Time
	// Of the instance the request was finally sent to: when the backend decided to start it
	// (Instance.Requested), when the source first listed it with an address, and when it became
	// routable (its health check passed, or the backend reported it ready). Any may precede
	// HeldAt (the instance was starting, or was busy, when the request arrived).
	Requested, Listed, Ready time.Time
}

// Timing reports the request's wait; ok is false when it was not held.
func (l *Lease) Timing() (t Timing, ok bool) {
	if l.heldAt.IsZero() {
		return Timing{}, false
	}
	return Timing{HeldAt: l.heldAt, Granted: l.heldAt.Add(l.Held),
		Requested: l.in.requested, Listed: l.in.listed, Ready: l.in.readyAt}, true
}

// URL is where the request goes.
func (l *Lease) URL() *url.URL { return l.in.url }

// Instance is the instance's ID.
func (l *Lease) Instance() string { return l.in.id }

// Release gives the slot back (once the response is done); a waiting request gets it.
func (l *Lease) Release() {
	l.once.Do(func() {
		f := l.f
		f.mu.Lock()
		l.in.inFlight--
		l.in.lastActive = l.a.now()
		f.grantLocked(l.a.now())
		f.mu.Unlock()
	})
}

// Retry marks the lease's instance gone (it could not be connected to) and gives the slot back;
// the caller may Acquire again.
func (l *Lease) Retry() {
	l.f.mu.Lock()
	l.in.gone = true
	l.f.ready = slices.DeleteFunc(l.f.ready, func(i *instance) bool { return i == l.in })
	l.f.mu.Unlock()
	l.Release()
}

func key(ns, name string) string { return ns + "/" + name }

func (a *Activator) function(ns, name string) *function {
	k := key(ns, name)
	a.mu.RLock()
	f := a.fns[k]
	a.mu.RUnlock()
	if f != nil {
		return f
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f = a.fns[k]
	if f == nil {
		f = &function{ns: ns, name: name, starting: map[string]*starting{}, probing: map[string]bool{}}
		a.fns[k] = f
	}
	return f
}

// Known reports whether the activator has state for the function.
func (a *Activator) Known(ns, name string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.fns[key(ns, name)] != nil
}

// Forget drops a deleted function's state.
func (a *Activator) Forget(ns, name string) {
	a.mu.Lock()
	delete(a.fns, key(ns, name))
	a.mu.Unlock()
}

// Acquire returns a slot on the ready instance with the fewest requests in flight below lim's
// concurrency (ties: the one ready longest, so that load packs and the others can go idle). With
// none, the request waits (is held) until one has a slot or ctx ends; the Scaler is poked. Beyond
// lim.MaxHeld waiting it fails with ErrThrottled.
func (a *Activator) Acquire(ctx context.Context, ns, name string, lim Limits) (*Lease, error) {
	f := a.function(ns, name)
	now := a.now()
	// The source is asked on every request, before choosing: backends do not say when they
	// switch instances (a rollout, a scale-down), and both answer from memory.
	if err := a.refresh(ctx, f); err != nil && a.scaler == nil {
		return nil, err
	}
	f.mu.Lock()
	f.lim = lim
	if in := f.pickLocked(); in != nil {
		in.inFlight++
		in.lastActive = now
		f.mu.Unlock()
		return &Lease{f: f, a: a, in: in}, nil
	}
	if (a.scaler == nil || lim.NoStart) && len(f.ready) == 0 && len(f.starting) == 0 {
		f.mu.Unlock()
		return nil, ErrNoInstance
	}
	if len(f.waiters) >= max(lim.MaxHeld, 0) || (lim.ScaleLimited && len(f.ready) == 0 && len(f.starting) == 0) {
		f.mu.Unlock()
		return nil, ErrThrottled
	}
	cold := len(f.ready) == 0
	w := &waiter{ch: make(chan *instance, 1)}
	f.waiters = append(f.waiters, w)
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if a.scaler != nil {
		a.scaler.Poke(ns, name)
	}
	if start {
		go a.loop(f)
	}
	select {
	case in := <-w.ch:
		if in == nil {
			return nil, ErrScaleLimited
		}
		return &Lease{f: f, a: a, in: in, Held: a.now().Sub(now), Cold: cold, heldAt: now}, nil
	case <-ctx.Done():
		f.mu.Lock()
		if i := slices.Index(f.waiters, w); i >= 0 {
			f.waiters = slices.Delete(f.waiters, i, i+1)
			f.mu.Unlock()
			return nil, ctx.Err()
		}
		f.mu.Unlock()
		// Granted as the context ended: hand the slot on (nil: answered ErrScaleLimited, no slot).
		if in := <-w.ch; in != nil {
			(&Lease{f: f, a: a, in: in}).Release()
		}
		return nil, ctx.Err()
	}
}

// pickLocked is the ready instance with the fewest in flight below the concurrency; nil if none.
func (f *function) pickLocked() *instance {
	var best *instance
	for _, in := range f.ready {
		if in.inFlight < max(f.lim.Concurrency, 1) && (best == nil || in.inFlight < best.inFlight) {
			best = in
		}
	}
	return best
}

// grantLocked gives free slots to waiting requests, oldest first.
func (f *function) grantLocked(now time.Time) {
	for len(f.waiters) > 0 {
		in := f.pickLocked()
		if in == nil {
			return
		}
		w := f.waiters[0]
		f.waiters = f.waiters[1:]
		in.inFlight++
		in.lastActive = now
		w.ch <- in
	}
}

// loop runs while requests wait: it asks the source again and probes starting instances every
// probe interval, so that a new instance serves as soon as it answers its health check.
func (a *Activator) loop(f *function) {
	t := time.NewTicker(a.probeEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a.refresh(ctx, f)
		f.mu.Lock()
		none := len(f.ready) == 0 && len(f.starting) == 0 && len(f.waiters) > 0
		f.mu.Unlock()
		if sl, ok := a.src.(ScaleLimiter); ok && none && sl.ScaleLimited(ctx, f.ns, f.name) {
			f.mu.Lock()
			if len(f.ready) == 0 && len(f.starting) == 0 {
				for _, w := range f.waiters {
					w.ch <- nil // ErrScaleLimited
				}
				f.waiters = nil
			}
			f.mu.Unlock()
		}
		cancel()
		f.mu.Lock()
		if len(f.waiters) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		<-t.C
	}
}

// refresh reads the function's instances from the source: ready ones become routable, starting
// ones with an address are probed (concurrently, one probe each at a time), those no longer
// listed take no new requests.
func (a *Activator) refresh(ctx context.Context, f *function) error {
	list, err := a.src.Instances(ctx, f.ns, f.name)
	now := a.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	listed := make(map[string]bool, len(list))
	for i := range list {
		inst := list[i]
		listed[inst.ID] = true
		if inst.Ready && inst.URL != nil {
			f.addReadyLocked(inst, f.listedLocked(inst, now), now)
			continue
		}
		if f.isReadyLocked(inst.ID) {
			continue // probed ready already; the backend's verdict catches up
		}
		f.starting[inst.ID] = &starting{Instance: inst, listed: f.listedLocked(inst, now)}
		if inst.URL != nil && !f.probing[inst.ID] {
			f.probing[inst.ID] = true
			go a.probeOnce(f, inst)
		}
	}
	for id := range f.starting {
		if !listed[id] {
			delete(f.starting, id)
		}
	}
	f.ready = slices.DeleteFunc(f.ready, func(in *instance) bool {
		if !listed[in.id] {
			in.gone = true
			return true
		}
		return false
	})
	f.grantLocked(now)
	return nil
}

func (f *function) isReadyLocked(id string) bool {
	return slices.ContainsFunc(f.ready, func(in *instance) bool { return in.id == id })
}

// listedLocked is when inst was first listed with an address (now if this is that time).
func (f *function) listedLocked(inst Instance, now time.Time) time.Time {
	if inst.URL == nil {
		return time.Time{}
	}
	if st := f.starting[inst.ID]; st != nil && !st.listed.IsZero() && st.URL != nil &&
		st.URL.Scheme == inst.URL.Scheme && st.URL.Host == inst.URL.Host {
		return st.listed
	}
	return now
}

func (f *function) addReadyLocked(inst Instance, listed, now time.Time) {
	delete(f.starting, inst.ID)
	for i, in := range f.ready {
		if in.id == inst.ID {
			if in.url.Scheme == inst.URL.Scheme && in.url.Host == inst.URL.Host {
				return
			}
			// An instance's url never changes once made (leases read it unlocked): a new
			// address is a new instance; the old one finishes what it has.
			in.gone = true
			f.ready[i] = &instance{id: inst.ID, url: inst.URL, lastActive: in.lastActive,
				requested: inst.Requested, listed: listed, readyAt: now}
			return
		}
	}
	f.ready = append(f.ready, &instance{id: inst.ID, url: inst.URL, lastActive: now,
		requested: inst.Requested, listed: listed, readyAt: now})
}

// probeOnce asks a starting instance's health endpoint; on 200 it becomes routable at once.
func (a *Activator) probeOnce(f *function, inst Instance) {
	ok := false
	u := *inst.URL
	u.Path = HealthPath
	if resp, err := a.probe.Get(u.String()); err == nil {
		resp.Body.Close()
		ok = resp.StatusCode == http.StatusOK
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.probing, inst.ID)
	if ok {
		if _, still := f.starting[inst.ID]; still {
			now := a.now()
			f.addReadyLocked(inst, f.listedLocked(inst, now), now)
			f.grantLocked(now)
		}
	}
}

// InstanceLoad is one ready instance's load.
type InstanceLoad struct {
	ID         string
	InFlight   int
	LastActive time.Time
}

// Load is a function's load as this activator sees it.
type Load struct {
	Namespace, Name string
	InFlight, Held  int
	Instances       []InstanceLoad
}

// Loads reports every function's load (for the decider and /metrics).
func (a *Activator) Loads() []Load {
	a.mu.RLock()
	fns := make([]*function, 0, len(a.fns))
	for _, f := range a.fns {
		fns = append(fns, f)
	}
	a.mu.RUnlock()
	out := make([]Load, 0, len(fns))
	for _, f := range fns {
		f.mu.Lock()
		l := Load{Namespace: f.ns, Name: f.name, Held: len(f.waiters)}
		for _, in := range f.ready {
			l.InFlight += in.inFlight
			l.Instances = append(l.Instances, InstanceLoad{ID: in.id, InFlight: in.inFlight, LastActive: in.lastActive})
		}
		f.mu.Unlock()
		out = append(out, l)
	}
	return out
}
