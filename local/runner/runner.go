package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// legacyLabels maps the labels an earlier sless up put on its containers to runspec's.
var legacyLabels = map[string]string{
	"dev.sless.instance":  runspec.LabelInstance,
	"dev.sless.namespace": runspec.LabelNamespace,
	"dev.sless.function":  runspec.LabelFunction,
	"dev.sless.port":      runspec.LabelPort,
	"dev.sless.role":      runspec.LabelRole,
	"dev.sless.job":       runspec.LabelJob,
}

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

// Runner runs this sless up's containers.
type Runner struct {
	pm       *podman.Client
	instance string
	dataDir  string
	network  string

	mu    sync.RWMutex
	pools map[string]*pool // "ns/name" -> its serving version's instances
	// stopping counts the pending removals of each container name: a name is not reused until
	// they are done (a removal deletes the name's private variables, and a stale removal by name
	// would take a new container of that name).
	stopping map[string]int
	lookup   func(id string) (netip.Addr, bool)

	ledger *ledger // what each namespace's containers take, against its Limits
}

// New runs containers with pm on network (the instance's own: local/network), labelled with
// instance; job results go under dataDir.
func New(pm *podman.Client, instance, dataDir, network string) *Runner {
	r := &Runner{pm: pm, instance: instance, dataDir: dataDir, network: network, pools: map[string]*pool{}, stopping: map[string]int{}}
	r.ledger = newLedger(r.running)
	return r
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

// instanceName is container k of a version.
func instanceName(version string, k int) string {
	if k == 0 {
		return version
	}
	return version + "-" + strconv.Itoa(k)
}

// versionOf is the version of function container name: the name without an instance number
// (ContainerName ends in six hex digits, an instance number has at most three).
func versionOf(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || len(name)-i-1 > 3 {
		return name
	}
	if k, err := strconv.Atoi(name[i+1:]); err == nil && k > 0 && strconv.Itoa(k) == name[i+1:] {
		return name[:i]
	}
	return name
}

// ofVersion reports whether container name is one of version's instances.
func ofVersion(name, version string) bool {
	if name == version {
		return true
	}
	rest, ok := strings.CutPrefix(name, version+"-")
	if !ok || rest == "" {
		return false
	}
	k, err := strconv.Atoi(rest)
	return err == nil && k > 0 && strconv.Itoa(k) == rest
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

// startSpare starts the spare container cname (ID id) of f, as start does; if podman cannot
// (removed by hand meanwhile), it runs the container anew.
func (r *Runner) startSpare(ctx context.Context, f Function, cname, id string, addressed func(*url.URL)) error {
	bk := booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: versionOf(cname)}
	if err := r.ledger.reserve(ctx, cname, bk, false); err != nil {
		return err
	}
	if _, err := r.pm.Run(ctx, "start", cname); err != nil {
		r.clear(ctx, cname, 0)
		r.ledger.release(cname)
		return r.start(ctx, f, cname, false, addressed)
	}
	r.ledger.started(cname)
	return r.healthy(ctx, cname, id, addressed)
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
	var id string
	if err == nil {
		args := slices.DeleteFunc(podman.RunArgs(spec), func(a string) bool { return a == "-d" })
		args[0] = "create"
		if id, err = r.pm.Run(ctx, args...); err != nil && strings.Contains(err.Error(), "already in use") {
			r.pm.Remove(ctx, cname, 0) // a leftover of the name
			id, err = r.pm.Run(ctx, args...)
		}
	}
	r.mu.Lock()
	p.preparing = ""
	if err != nil {
		r.mu.Unlock()
		os.RemoveAll(r.envDir(cname))
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

// Container is one of this instance's containers, its labels in runspec's vocabulary whatever
// version of sless up started it.
type Container = podman.Container

// List returns this instance's containers, with the old labels of earlier versions translated.
func (r *Runner) List(ctx context.Context) ([]Container, error) {
	cs, err := r.pm.List(ctx, runspec.LabelInstance, r.instance)
	if err != nil {
		return nil, err
	}
	old, err := r.pm.List(ctx, "dev.sless.instance", r.instance)
	if err != nil {
		return nil, err
	}
	for _, c := range old {
		labels := map[string]string{}
		for k, v := range c.Labels {
			if nk, ok := legacyLabels[k]; ok {
				k = nk
			}
			labels[k] = v
		}
		c.Labels = labels
		cs = append(cs, c)
	}
	return cs, nil
}

// Function is what a function container runs.
type Function struct {
	Namespace, Name string
	Image           string // by digest
	Env             map[string]string
	TimeoutSec      int
	MemoryMB        int
	// IDBase is the tenant's range of host uids/gids (state.UIDBase): the container's user
	// 65532 is host user IDBase+65532.
	IDBase uint32
}

// hostID is the host uid (and gid) the function's user runs as.
func (f Function) hostID() int { return int(f.IDBase) + runspec.UID }

func (f Function) instance() runspec.Instance {
	// A network namespace of its own: the runtime's defaults (every interface, runspec.Port);
	// /fn/ reaches it on its container address.
	return runspec.Instance{EnvVars: f.Env, TimeoutSec: f.TimeoutSec}
}

// ContainerName is sless-<ns>-<name>-<digest12>-<config6>: an update (new digest) or a new run
// configuration (env vars, timeout, memory, network) starts a container beside the old one. A
// container keeps its name across restarts of sless up, which adopt it.
func (r *Runner) ContainerName(f Function) string {
	_, digest, _ := strings.Cut(f.Image, "@sha256:")
	h := sha256.New()
	fmt.Fprintf(h, "memory=%d\n", f.MemoryMB)
	fmt.Fprintf(h, "network=%s\nids=%d\n", r.network, f.IDBase)
	vars := runspec.Env(f.instance())
	sort.Slice(vars, func(i, j int) bool { return vars[i].Name < vars[j].Name })
	for _, v := range vars {
		if v.Name != runspec.EnvPort {
			fmt.Fprintf(h, "%s=%s\n", v.Name, v.Value)
		}
	}
	return fmt.Sprintf("sless-%s-%s-%.12s-%s", f.Namespace, f.Name, digest, hex.EncodeToString(h.Sum(nil))[:6])
}

// envMount is where a container finds its private variables (runspec.EnvFile).
const envMount = "/run/sless-env"

// envDir holds the private variables of container name on the host.
func (r *Runner) envDir(name string) string { return filepath.Join(r.dataDir, "env", name) }

// environment splits vars: the platform's go on podman's command line, the private ones (the
// user's env vars, a job's event) into a file only the function's user can read, mounted
// read-only, which the runtime loads (runspec.EnvFile). It returns the command-line variables and
// the volume to mount.
func (r *Runner) environment(container string, hostID int, vars []runspec.EnvVar) ([]podman.EnvVar, string, error) {
	private := map[string]string{}
	var public []podman.EnvVar
	for _, v := range vars {
		if runspec.Private(v.Name) {
			private[v.Name] = v.Value
		} else {
			public = append(public, podman.EnvVar{Name: v.Name, Value: v.Value})
		}
	}
	dir := r.envDir(container)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	b, err := json.Marshal(private)
	if err != nil {
		return nil, "", err
	}
	file := filepath.Join(dir, "env.json")
	if err := os.WriteFile(file, b, 0o400); err != nil {
		return nil, "", err
	}
	// Owned by the function's user: readable by it, by nobody else (and writable by no one).
	if err := errors.Join(os.Chown(file, hostID, hostID), os.Chown(dir, hostID, hostID), os.Chmod(dir, 0o500)); err != nil {
		return nil, "", err
	}
	public = append(public, podman.EnvVar{Name: runspec.EnvFile, Value: envMount + "/env.json"})
	return public, dir + ":" + envMount + ":ro", nil
}

// remove removes a container and what the runner kept for it, and stops counting it.
func (r *Runner) remove(ctx context.Context, name string, grace int) error {
	err := r.clear(ctx, name, grace)
	r.ledger.release(name)
	r.mu.Lock()
	if r.stopping[name]--; r.stopping[name] <= 0 {
		delete(r.stopping, name)
	}
	r.mu.Unlock()
	return err
}

// marked counts a removal of name as pending (remove counts it down).
func (r *Runner) marked(name string) {
	r.mu.Lock()
	r.stopping[name]++
	r.mu.Unlock()
}

// clear removes a leftover container of the name a new one is about to take (its booking, if
// any, is the new one's).
func (r *Runner) clear(ctx context.Context, name string, grace int) error {
	err := r.pm.Remove(ctx, name, grace)
	os.RemoveAll(r.envDir(name))
	r.stoppedLog(name)
	return err
}

// CleanEnv removes the private variables of containers that are gone (keep: the names that run).
// Those written in the last minute stay: the controller, already at work, may be starting their
// container right now.
func (r *Runner) CleanEnv(keep map[string]bool) {
	entries, _ := os.ReadDir(filepath.Join(r.dataDir, "env"))
	for _, e := range entries {
		if info, err := e.Info(); keep[e.Name()] || (err == nil && time.Since(info.ModTime()) < time.Minute) {
			continue
		}
		os.RemoveAll(filepath.Join(r.dataDir, "env", e.Name()))
	}
}

// Remove removes a container of this instance (and its private variables).
func (r *Runner) Remove(ctx context.Context, name string, grace int) error {
	return r.remove(ctx, name, grace)
}

// Serve runs (or adopts) instance 0 of the function's version and waits until its health check
// answers: a new version must start and pass it before it serves. It does not switch /fn/ to it
// (Switch does).
func (r *Runner) Serve(ctx context.Context, f Function) (*Instance, error) {
	cname := r.ContainerName(f)
	r.mu.RLock()
	busy := r.stopping[cname] > 0
	r.mu.RUnlock()
	if busy {
		// A container of this name (this version, switched away from a moment ago) is still
		// finishing its requests: neither adopt it nor start one of its name until it is gone.
		return nil, fmt.Errorf("the previous container %s of this version is still stopping", cname)
	}
	if cs, err := r.List(ctx); err == nil {
		if inst := r.adopt(ctx, cs, cname); inst != nil {
			r.ledger.note(cname, booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: cname})
			return inst, nil
		}
	}
	var inst *Instance
	err := r.start(ctx, f, cname, true, func(u *url.URL) { inst = &Instance{Name: cname, URL: u} })
	return inst, err
}

// start runs container cname of f, calls addressed with its address as soon as it has one, and
// waits for its health check. An error leaves nothing behind.
func (r *Runner) start(ctx context.Context, f Function, cname string, first bool, addressed func(*url.URL)) error {
	bk := booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: versionOf(cname), replaces: first}
	if err := r.ledger.reserve(ctx, cname, bk, false); err != nil {
		return err
	}
	spec, err := r.functionSpec(f, cname)
	if err != nil {
		r.ledger.release(cname)
		return err
	}
	id, err := r.pm.Start(ctx, spec)
	if err != nil && strings.Contains(err.Error(), "already in use") {
		// A leftover of the same name (stopped, or on another network): removed only now, so
		// that the usual start costs no `podman rm` (about 150 ms).
		r.pm.Remove(ctx, cname, 5)
		id, err = r.pm.Start(ctx, spec)
	}
	if err != nil {
		os.RemoveAll(r.envDir(cname))
		r.ledger.release(cname)
		return fmt.Errorf("starting the container: %w", err)
	}
	r.ledger.started(cname)
	return r.healthy(ctx, cname, strings.TrimSpace(id), addressed)
}

// functionSpec is how container cname of f runs; its private variables are written for it.
func (r *Runner) functionSpec(f Function, cname string) (podman.Spec, error) {
	labels := map[string]string{runspec.LabelInstance: r.instance, runspec.LabelNamespace: f.Namespace, runspec.LabelFunction: f.Name,
		runspec.LabelPort: strconv.Itoa(runspec.Port), runspec.LabelRole: string(runspec.RoleFunction), labelMemory: strconv.Itoa(f.MemoryMB)}
	env, volume, err := r.environment(cname, f.hostID(), runspec.Env(f.instance()))
	if err != nil {
		return podman.Spec{}, err
	}
	logs, err := r.logFlags(f.Namespace, f.Name, cname)
	if err != nil {
		return podman.Spec{}, err
	}
	return podman.Spec{Name: cname, Image: f.Image, Labels: labels, Env: env, Volumes: []string{volume},
		Detach: true, MemoryMB: f.MemoryMB, Confined: true, Network: r.network, IDBase: f.IDBase, Flags: logs}, nil
}

// healthy learns started container cname's address (ID id), hands it to addressed and waits for
// its health check; a container that fails it is removed, with its last output in the error.
func (r *Runner) healthy(ctx context.Context, cname, id string, addressed func(*url.URL)) error {
	inst, err := r.addressOf(ctx, cname, id, runspec.Port)
	if err == nil {
		addressed(inst.URL)
		err = r.waitHealthy(ctx, inst)
	}
	if err != nil {
		stdout, stderr := r.pm.Logs(ctx, cname, 20)
		r.remove(context.WithoutCancel(ctx), cname, 5)
		return fmt.Errorf("%v; last output:\n%s", err, strings.TrimSpace(podman.LastLines(stderr+stdout, 15)))
	}
	return nil
}

// Adopt routes /fn/ to each function's running containers that answer their health check (after
// a restart of sless up, before the platform reports ready): every instance of its version, so a
// scaled-out function keeps its scale, else one an earlier version started (adoptPrevious). One
// listing of the containers serves them all.
func (r *Runner) Adopt(ctx context.Context, fs []Function) {
	cs, err := r.List(ctx)
	if err != nil {
		return
	}
	for _, f := range fs {
		version := r.ContainerName(f)
		var insts []*Instance
		spare, spareID := "", ""
		for _, c := range cs {
			if !ofVersion(c.Name, version) {
				continue
			}
			if c.State == "created" && spare == "" && slices.Contains(c.Networks, r.network) {
				spare, spareID = c.Name, c.ID
			} else if inst := r.adopt(ctx, cs, c.Name); inst != nil {
				insts = append(insts, inst)
			}
		}
		if len(insts) == 0 {
			if inst := r.adoptPrevious(ctx, cs, f); inst != nil {
				r.Switch(f, inst)
			}
			continue
		}
		r.Switch(f, insts[0])
		r.mu.Lock()
		p := r.pools[f.Namespace+"/"+f.Name]
		p.ready = append(p.ready, insts[1:]...)
		p.spare, p.spareID = spare, spareID
		r.mu.Unlock()
	}
}

// adoptPrevious serves f, for now, from a running container of f that an earlier version
// started otherwise — on the host's network (reached on 127.0.0.1:<port>), or without the
// tenant's uid range: Current is false for it, so the controller starts f's container beside it
// and switches without a failed request.
func (r *Runner) adoptPrevious(ctx context.Context, cs []Container, f Function) *Instance {
	for _, c := range cs {
		if c.State != "running" || c.Labels[runspec.LabelRole] != string(runspec.RoleFunction) ||
			c.Labels[runspec.LabelNamespace] != f.Namespace || c.Labels[runspec.LabelFunction] != f.Name {
			continue
		}
		port, err := strconv.Atoi(c.Labels[runspec.LabelPort])
		if err != nil {
			continue
		}
		var inst *Instance
		switch {
		case len(c.Networks) == 0:
			inst = &Instance{Name: c.Name, URL: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}}
		case slices.Contains(c.Networks, r.network):
			if inst, err = r.instanceOf(ctx, c.Name, port); err != nil {
				continue
			}
		default:
			continue
		}
		inst.stale = true
		if r.waitHealthy(ctx, inst) != nil {
			continue
		}
		// Its replacement takes the name.
		if c.Name == r.ContainerName(f) {
			inst.Name = c.Name + "-previous"
			if _, err := r.pm.Run(ctx, "rename", c.Name, inst.Name); err != nil {
				return nil
			}
			os.Rename(r.envDir(c.Name), r.envDir(inst.Name))
			r.ledger.rename(c.Name, inst.Name)
		}
		return inst
	}
	return nil
}

// adopt takes over a running container of this name (after a restart of sless up). A running
// container is never removed for answering its health check slowly: a busy handler can stall it.
func (r *Runner) adopt(ctx context.Context, cs []Container, cname string) *Instance {
	for _, c := range cs {
		if c.Name == cname && c.State == "running" && slices.Contains(c.Networks, r.network) {
			port, err := strconv.Atoi(c.Labels[runspec.LabelPort])
			if err != nil {
				return nil
			}
			inst, err := r.instanceOf(ctx, cname, port)
			if err != nil {
				return nil
			}
			if r.waitHealthy(ctx, inst) == nil {
				return inst
			}
		}
	}
	return nil
}

// SetAddresses gives the runner a faster way to learn a new container's address than asking
// podman: lookup returns the address recorded for a container ID (local/network's IPAM store).
func (r *Runner) SetAddresses(lookup func(id string) (netip.Addr, bool)) { r.lookup = lookup }

// addressOf is container cname (ID id) as /fn/ reaches it: from the address lookup, else podman.
func (r *Runner) addressOf(ctx context.Context, cname, id string, port int) (*Instance, error) {
	if r.lookup != nil {
		if ip, ok := r.lookup(id); ok {
			return &Instance{Name: cname, URL: &url.URL{Scheme: "http", Host: netip.AddrPortFrom(ip, uint16(port)).String()}}, nil
		}
	}
	return r.instanceOf(ctx, cname, port)
}

// instanceOf is container cname as /fn/ reaches it: its address on the runner's network.
func (r *Runner) instanceOf(ctx context.Context, cname string, port int) (*Instance, error) {
	ip, err := r.pm.IP(ctx, cname, r.network)
	if err != nil {
		return nil, err
	}
	return &Instance{Name: cname, URL: &url.URL{Scheme: "http", Host: netip.AddrPortFrom(ip, uint16(port)).String()}}, nil
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

func healthy(ctx context.Context, inst *Instance) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, inst.URL.String()+runspec.HealthPath, nil)
	resp, err := healthClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitHealthy polls the health check until it answers, the container exits, or 60 s pass.
func (r *Runner) waitHealthy(ctx context.Context, inst *Instance) error {
	deadline := time.Now().Add(60 * time.Second)
	lastState := time.Now()
	for time.Now().Before(deadline) {
		if healthy(ctx, inst) {
			return nil
		}
		if time.Since(lastState) > 500*time.Millisecond {
			lastState = time.Now()
			if st, err := r.pm.State(ctx, inst.Name); err == nil && st != "running" && st != "created" {
				return fmt.Errorf("the function exited at start (%s)", st)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("the function did not answer its health check within 60 s")
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

// RemoveWhere removes this instance's containers that match, each within grace seconds.
func (r *Runner) RemoveWhere(ctx context.Context, grace int, match func(Container) bool) {
	cs, err := r.List(ctx)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		if !match(c) {
			continue
		}
		r.marked(c.Name) // no new container takes the name until this one is gone
		wg.Add(1)
		go func() { // at once: each may take its whole grace
			defer wg.Done()
			r.remove(ctx, c.Name, grace)
		}()
	}
	wg.Wait()
}

// Run is one job or cron run.
type Run struct {
	// Container names the run; a restart of sless up attaches to it by this name.
	Container string
	Function  Function
	Role      runspec.Role
	Job       string // the job's name (RoleJob)
	Event     string // the event, JSON text
}

// Outcome is how a run ended.
type Outcome struct {
	OK bool
	// Message is the result (the handler's JSON) or the error.
	Message string
	// Interrupted: ctx ended first (sless up is stopping); the container was left running and the
	// next start attaches to it (Attach).
	Interrupted bool
}

// RunOnce runs a job-mode container to completion. It takes over the run's booking (Reserve), or
// books it: a run beyond its namespace's limits ends at once with the *QuotaError's message.
func (r *Runner) RunOnce(ctx context.Context, run Run) Outcome {
	resultDir := r.resultDir(run.Container)
	r.clear(context.WithoutCancel(ctx), run.Container, 5)
	if err := r.ledger.reserve(ctx, run.Container, runBooking(run), true); err != nil {
		return Outcome{Message: err.Error()}
	}
	os.RemoveAll(resultDir)
	// Job mode writes its result (or error) to TERMINATION_LOG, as on Kubernetes; a host directory
	// mounted there hands it over without depending on the log pipeline.
	if err := os.MkdirAll(resultDir, 0o700); err != nil {
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	os.Chown(resultDir, run.Function.hostID(), run.Function.hostID()) // the function's user, in its tenant's range
	labels := map[string]string{runspec.LabelInstance: r.instance, runspec.LabelNamespace: run.Function.Namespace,
		runspec.LabelFunction: run.Function.Name, runspec.LabelRole: string(run.Role), labelMemory: strconv.Itoa(run.Function.MemoryMB)}
	if run.Job != "" {
		labels[runspec.LabelJob] = run.Job
	}
	env, volume, err := r.environment(run.Container, run.Function.hostID(), append(runspec.JobEnv(run.Function.instance(), run.Event),
		runspec.EnvVar{Name: runspec.EnvTerminationLog, Value: "/run/sless/result"}))
	if err != nil {
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	spec := podman.Spec{Name: run.Container, Image: run.Function.Image, Labels: labels, Env: env, Detach: true,
		MemoryMB: run.Function.MemoryMB, Volumes: []string{resultDir + ":/run/sless", volume}, Confined: true, Network: r.network,
		IDBase: run.Function.IDBase}
	if _, err := r.pm.Start(context.WithoutCancel(ctx), spec); err != nil {
		os.RemoveAll(r.envDir(run.Container))
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	r.ledger.started(run.Container)
	return r.Attach(ctx, run.Container)
}

// Attach waits for a started run to end (after a restart of sless up too) and returns its outcome:
// the result it wrote, else the last line it printed, or its error output.
func (r *Runner) Attach(ctx context.Context, container string) Outcome {
	code, err := r.pm.Wait(ctx, container)
	if ctx.Err() != nil {
		return Outcome{Interrupted: true}
	}
	resultDir := r.resultDir(container)
	defer os.RemoveAll(resultDir)
	result, rerr := ReadResult(filepath.Join(resultDir, "result"))
	stdout, stderr := r.pm.Logs(ctx, container, 50)
	// conmon may still be writing the log when wait returns (seen under load): a successful run
	// always prints its result, so give an empty log a moment.
	for i := 0; err == nil && code == 0 && len(result) == 0 && strings.TrimSpace(stdout) == "" && i < 20; i++ {
		time.Sleep(100 * time.Millisecond)
		stdout, stderr = r.pm.Logs(ctx, container, 50)
	}
	r.remove(ctx, container, 5)
	if err != nil {
		return Outcome{Message: err.Error()}
	}
	if rerr != nil {
		return Outcome{Message: "the run's result could not be read: " + rerr.Error()}
	}
	if code != 0 {
		if msg := strings.TrimSpace(podman.LastLines(stderr, 10)); msg != "" {
			return Outcome{Message: msg}
		}
		return Outcome{Message: strings.TrimSpace(result)}
	}
	if len(result) > 0 {
		return Outcome{OK: true, Message: strings.TrimSpace(result)}
	}
	return Outcome{OK: true, Message: strings.TrimSpace(podman.LastLines(stdout, 1))}
}

func (r *Runner) resultDir(container string) string {
	return filepath.Join(r.dataDir, "results", container)
}

// ErrNotRegular says a run's result is not a regular file (a symlink, a FIFO, a device).
var ErrNotRegular = errors.New("the result is not a regular file")

// ReadResult reads what a container wrote as its result without trusting it: the last path
// element is not followed if it is a symlink, a FIFO or device never blocks the read (non-blocking
// open, regular files only), and at most runspec.MaxResultBytes are read (a huge or sparse file
// costs nothing). A missing file is an empty result.
func ReadResult(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return "", ErrNotRegular
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", ErrNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, runspec.MaxResultBytes))
	return string(b), err
}
