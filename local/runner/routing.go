package runner

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// Instance is a function container /fn/ routes to.
type Instance struct {
	Name string
	URL  *url.URL
	// Requested is when the scaler asked for it (zero: the version's first, or adopted).
	Requested time.Time
	// stale: an earlier version's container (adoptPrevious), served until its replacement is up.
	stale bool
}

// pool is what /fn/ routes one function to: the instances of one version (ContainerName), ready
// ones and those still starting. Instance 0 of a version is the container named ContainerName,
// instance k > 0 is ContainerName-k.
type pool struct {
	version  string
	fn       Function
	ready    []*Instance
	starting map[string]*Instance // started or being started; URL nil until it has an address
	// spare is a created, never started container of the version (its ID spareID), the next
	// instance to start: `podman start` skips the create (about 150–200 ms of a cold start here).
	// It takes no memory and is no instance. preparing names the one being created.
	spare, spareID, preparing string
}

var (
	_ objects.Resolver = (*Runner)(nil)
	_ activator.Source = (*Runner)(nil)
)

// Resolve routes to one of the function's ready containers.
func (r *Runner) Resolve(_ context.Context, ns, name string) (*url.URL, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if p := r.pools[ns+"/"+name]; p != nil && len(p.ready) > 0 {
		return p.ready[0].URL, nil
	}
	return nil, &objects.NotReadyError{Reason: fmt.Sprintf("function %q has no running instance yet", name)}
}

// Instances lists the function's ready containers and, not ready, those starting (the activator
// probes those with an address itself and forwards as soon as one answers). A container being
// stopped is not listed.
func (r *Runner) Instances(_ context.Context, ns, name string) ([]activator.Instance, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p := r.pools[ns+"/"+name]
	if p == nil {
		return nil, nil
	}
	out := make([]activator.Instance, 0, len(p.ready)+len(p.starting))
	for _, in := range p.ready {
		out = append(out, activator.Instance{ID: in.Name, URL: in.URL, Ready: true, Requested: in.Requested})
	}
	for _, in := range p.starting {
		// Without an address yet too: the activator counts it as starting (a request holds for
		// it rather than being refused as having nothing to wait for).
		out = append(out, activator.Instance{ID: in.Name, URL: in.URL, Requested: in.Requested})
	}
	return out, nil
}

// Switch makes f's version the one ns/name serves, with inst (nil: none yet, the scaler starts
// them) as its one ready instance: new requests go there from now on. The earlier version's
// containers are no longer routed to (Stop removes them).
func (r *Runner) Switch(f Function, inst *Instance) {
	p := &pool{version: r.ContainerName(f), fn: f, starting: map[string]*Instance{}}
	if inst != nil {
		p.ready = []*Instance{inst}
	}
	r.mu.Lock()
	r.pools[f.Namespace+"/"+f.Name] = p
	r.mu.Unlock()
}

// Serving is the version (ContainerName) ns/name serves, "" if none or an earlier sless up's
// container (adoptPrevious).
func (r *Runner) Serving(ns, name string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p := r.pools[ns+"/"+name]
	if p == nil || (len(p.ready) == 1 && p.ready[0].stale) {
		return ""
	}
	return p.version
}

// Scale is how many instances ns/name has: ready and starting.
func (r *Runner) Scale(ns, name string) (ready, starting int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if p := r.pools[ns+"/"+name]; p != nil {
		return len(p.ready), len(p.starting)
	}
	return 0, 0
}

// ReadyNames are the names of ns/name's ready containers.
func (r *Runner) ReadyNames(ns, name string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p := r.pools[ns+"/"+name]
	if p == nil {
		return nil
	}
	names := make([]string, len(p.ready))
	for i, in := range p.ready {
		names[i] = in.Name
	}
	return names
}

// Serves lists the functions ("ns/name") that have a serving version.
func (r *Runner) Serves() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	keys := make([]string, 0, len(r.pools))
	for k := range r.pools {
		keys = append(keys, k)
	}
	return keys
}

// BeginInstance counts one more container of ns/name's serving version as starting, at once (so a
// decision taken meanwhile sees it), and returns what starts it: it runs the container and waits
// for its health check, listed as starting meanwhile (the activator may send it requests as soon
// as it answers) and as ready after. requested is when it was asked for. An error leaves nothing
// behind: a *QuotaError when the namespace's memory limit has no room.
func (r *Runner) BeginInstance(ns, name string, requested time.Time) (func(context.Context) error, error) {
	key := ns + "/" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pools[key]
	if p == nil {
		return nil, fmt.Errorf("%s has no version to start", key)
	}
	cname, spareID := p.spare, p.spareID
	p.spare, p.spareID = "", ""
	if cname == "" {
		cname = r.freeNameLocked(p)
	}
	inst := &Instance{Name: cname, Requested: requested}
	p.starting[cname] = inst
	f := p.fn
	return func(ctx context.Context) error {
		addressed := func(u *url.URL) {
			r.mu.Lock()
			inst.URL = u
			r.mu.Unlock()
		}
		var err error
		if spareID != "" {
			err = r.startSpare(ctx, f, cname, spareID, addressed)
		} else {
			err = r.start(ctx, f, cname, false, addressed)
		}
		r.mu.Lock()
		delete(p.starting, cname)
		var qe *QuotaError
		orphan := false
		if err != nil && spareID != "" && errors.As(err, &qe) {
			if p.spare == "" && r.pools[key] == p {
				p.spare, p.spareID = cname, spareID // refused before it was touched: still the spare
			} else {
				orphan = true // created and never started, and no longer anyone's spare
			}
		}
		if err == nil && r.pools[key] != p {
			orphan = true // switched or stopped meanwhile: this container belongs to nothing now
			err = fmt.Errorf("%s changed version while an instance started", key)
		}
		if err == nil {
			p.ready = append(p.ready, inst)
		}
		if orphan {
			r.stopping[cname]++
		}
		r.mu.Unlock()
		if orphan {
			r.remove(context.WithoutCancel(ctx), cname, 5)
		}
		return err
	}, nil
}

// freeNameLocked is the lowest instance name of p's version no container has or is about to have.
func (r *Runner) freeNameLocked(p *pool) string {
	used := map[string]bool{p.spare: true, p.preparing: true}
	for _, in := range p.ready {
		used[in.Name] = true
	}
	for n := range p.starting {
		used[n] = true
	}
	k := 0
	for used[instanceName(p.version, k)] || r.stopping[instanceName(p.version, k)] > 0 {
		k++
	}
	return instanceName(p.version, k)
}

// NeedsSpare reports whether ns/name's serving version should have a spare created now: it has
// none, and no instance is starting (a create would compete with the start for the CPU).
func (r *Runner) NeedsSpare(ns, name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p := r.pools[ns+"/"+name]
	return p != nil && p.spare == "" && p.preparing == "" && len(p.starting) == 0 && !(len(p.ready) == 1 && p.ready[0].stale)
}

// PrepareSpare creates a spare container for ns/name's serving version (NeedsSpare).
func (r *Runner) PrepareSpare(ctx context.Context, ns, name string) error {
	key := ns + "/" + name
	r.mu.Lock()
	p := r.pools[key]
	if p == nil || p.spare != "" || p.preparing != "" {
		r.mu.Unlock()
		return nil
	}
	cname := r.freeNameLocked(p)
	p.preparing = cname
	f := p.fn
	r.mu.Unlock()
	spec, err := r.functionSpec(f, cname)
	if err == nil {
		err = r.identify(ctx, &spec, f.Namespace)
	}
	var id string
	if err == nil {
		if id, err = r.pm.Create(ctx, spec); err != nil && strings.Contains(err.Error(), "already in use") {
			r.pm.Remove(ctx, cname, 0) // a leftover of the name
			id, err = r.pm.Create(ctx, spec)
		}
	}
	r.mu.Lock()
	p.preparing = ""
	if err != nil {
		r.mu.Unlock()
		r.dropEnv(cname)
		return fmt.Errorf("creating a spare container: %w", err)
	}
	if r.pools[key] != p {
		r.stopping[cname]++
		r.mu.Unlock()
		return r.remove(context.WithoutCancel(ctx), cname, 0) // switched or stopped meanwhile
	}
	p.spare, p.spareID = cname, strings.TrimSpace(id)
	r.mu.Unlock()
	return nil
}

// Drain stops routing to ns/name's container id: /fn/ sends it no new request from now on.
func (r *Runner) Drain(ns, name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pools[ns+"/"+name]; p != nil {
		p.ready = slices.DeleteFunc(p.ready, func(in *Instance) bool { return in.Name == id })
	}
	r.stopping[id]++ // the removal that follows (Remove) counts it down
}

// StopInstance drains ns/name's container id and removes it, giving it grace seconds to finish
// the requests it has.
func (r *Runner) StopInstance(ctx context.Context, ns, name, id string, grace int) error {
	r.Drain(ns, name, id)
	return r.remove(ctx, id, grace)
}

// PruneAll forgets the ready containers that no longer run (crashed, run out of memory, removed
// by hand), from one listing of the containers for every function, so the autoscaler replaces
// them. It reports the containers it let go.
func (r *Runner) PruneAll(ctx context.Context) []string {
	cs, err := r.List(ctx)
	if err != nil {
		return nil
	}
	up := map[string]bool{}
	for _, c := range cs {
		if c.State == "running" {
			up[c.Name] = true
		}
	}
	type gone struct{ ns, name, id string }
	var dead []gone
	r.mu.RLock()
	for key, p := range r.pools {
		ns, name, _ := strings.Cut(key, "/")
		for _, in := range p.ready {
			if !in.stale && !up[in.Name] {
				dead = append(dead, gone{ns, name, in.Name})
			}
		}
	}
	r.mu.RUnlock()
	var out []string
	for _, g := range dead {
		r.StopInstance(ctx, g.ns, g.name, g.id, 0)
		out = append(out, g.id)
	}
	return out
}

// Stop removes ns/name's function containers except the instances of version keep ("": all,
// and /fn/ routes to none), giving each grace seconds to finish its requests.
func (r *Runner) Stop(ctx context.Context, ns, name, keep string, grace int) {
	r.mu.Lock()
	if p := r.pools[ns+"/"+name]; p != nil && p.version != keep {
		delete(r.pools, ns+"/"+name)
	}
	r.mu.Unlock()
	r.RemoveWhere(ctx, grace, func(c Container) bool {
		return c.Labels[runspec.LabelRole] == string(runspec.RoleFunction) && c.Labels[runspec.LabelNamespace] == ns &&
			c.Labels[runspec.LabelFunction] == name && (keep == "" || !ofVersion(c.Name, keep))
	})
}
