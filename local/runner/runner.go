package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/local/podman"
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

// Runner runs this sless up's containers.
type Runner struct {
	pm       *podman.Client
	instance string
	dataDir  string
	runDir   string // on a tmpfs: the containers' private variables and secret files
	network  string

	mu    sync.RWMutex
	pools map[string]*pool // "ns/name" -> its serving version's instances
	// stopping counts the pending removals of each container name: a name is not reused until
	// they are done (a removal deletes the name's private variables, and a stale removal by name
	// would take a new container of that name).
	stopping map[string]int
	lookup   func(id string) (netip.Addr, bool)
	// register enters a new container's MAC under its namespace (SetRegister); nil: none.
	register   func(ctx context.Context, ns, name string) (string, error)
	unregister func(name string)

	ledger *ledger // what each namespace's containers take, against its Limits

	listMu   sync.Mutex
	listings map[string]logListing // "ns/name" -> its log directory as last read (sharedLogFiles)
	// Test seams: the clock of listings and the directory read (nil: time.Now, os.ReadDir).
	now     func() time.Time
	readDir func(string) ([]os.DirEntry, error)
}

// New runs containers with pm on network (the instance's own: local/network), labelled with
// instance; job results go under dataDir, what containers are handed in private under RunDir.
func New(pm *podman.Client, instance, dataDir, network string) *Runner {
	r := &Runner{pm: pm, instance: instance, dataDir: dataDir, runDir: RunDir(instance), network: network, pools: map[string]*pool{}, stopping: map[string]int{}}
	r.ledger = newLedger(r.running)
	return r
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
	// SecretEnv are variables with values from the namespace's secrets, handed over as Env's are;
	// SecretFiles are directories of read-only files (directory → file name → content); Secrets
	// is the secrets' versions (runspec.SecretRefs.Versions), the part of the run configuration they
	// make: a new value starts a new version, and no value is part of any name.
	SecretEnv   map[string]string
	SecretFiles map[string]map[string]string
	Secrets     string
	TimeoutSec  int
	MemoryMB    int
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

// secretVars are SecretEnv sorted by name.
func (f Function) secretVars() []runspec.EnvVar {
	out := make([]runspec.EnvVar, 0, len(f.SecretEnv))
	for k, v := range f.SecretEnv {
		out = append(out, runspec.EnvVar{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ContainerName is sless-<ns>-<name>-<digest12>-<config6>: an update (new digest) or a new run
// configuration (env vars, timeout, memory, network) starts a container beside the old one. A
// container keeps its name across restarts of sless up, which adopt it.
func (r *Runner) ContainerName(f Function) string {
	_, digest, _ := strings.Cut(f.Image, "@sha256:")
	h := sha256.New()
	fmt.Fprintf(h, "memory=%d\n", f.MemoryMB)
	fmt.Fprintf(h, "network=%s\nids=%d\n", r.network, f.IDBase)
	if f.Secrets != "" {
		fmt.Fprintf(h, "secrets=%s\n", f.Secrets) // versions, not values: a name is seen by every process of the host
	}
	vars := runspec.Env(f.instance())
	sort.Slice(vars, func(i, j int) bool { return vars[i].Name < vars[j].Name })
	for _, v := range vars {
		if v.Name != runspec.EnvPort {
			fmt.Fprintf(h, "%s=%s\n", v.Name, v.Value)
		}
	}
	return fmt.Sprintf("sless-%s-%s-%.12s-%s", f.Namespace, f.Name, digest, hex.EncodeToString(h.Sum(nil))[:6])
}
