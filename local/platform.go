package local

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/indexproxy"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
	"github.com/sless-dev/sless/local/network"
	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/runtimeimages"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runspec"
)

// Config is what `sless up` passes in; only cmd/ reads flags and the environment.
type Config struct {
	// DataDir holds the state file, the registry, the code store and podman's config.
	DataDir string
	// RegistryListen is where the embedded registry listens ("127.0.0.1:5000").
	RegistryListen string
	// PodmanRoot is podman's storage (shared between instances, so base layers are pulled once).
	PodmanRoot string
	// BasesDir holds the language base image layouts (hack/build-bases.sh makes them).
	BasesDir string
	// Clock drives cron triggers. The default is the real clock.
	Clock Clock
	// PipIndexURL and NPMRegistry are the package indexes dependency installs use; empty means
	// pip's and npm's defaults.
	PipIndexURL, NPMRegistry string
	// DepsCAFile is a CA bundle mounted into dependency installs (pip, npm), for indexes behind a
	// TLS proxy or with a private CA. Empty: the runtime image's own bundle.
	DepsCAFile string
	// IndexHosts are hosts (host or host:port) installs may reach through the index proxy
	// besides those of PipIndexURL and NPMRegistry (e.g. files.pythonhosted.org). A runtime whose
	// index is not set gets the public one's hosts.
	IndexHosts []string
	// Subnet is the instance's /24 for its networks (local/network); zero picks a free one.
	Subnet netip.Prefix
	// Egress is what functions, jobs and cron runs may reach: the default mode and the
	// destinations beyond it (private ranges, a LAN database), for every namespace or one;
	// installs never get them. A namespace's owner may narrow it (PUT …/egress).
	Egress runspec.EgressInstall
	// ConnRate and ConnMax cap each container's new connections per second and connections at
	// once (zero: network.DefaultConnRate, DefaultConnMax).
	ConnRate, ConnMax int
	// GuardInterval is how often the network confinement is checked and restored (default 2 s).
	GuardInterval time.Duration
	// ObserveBuild hears every finished build, for metrics (build.Metrics.Observe).
	ObserveBuild func(build.Observation)
	// SecretsKeyFile is the key the namespaces' secrets are encrypted with in the state file
	// (state.LoadSecretKey: made on first use, mode 0600). Default: secrets.key in DataDir.
	SecretsKeyFile string
	// Logger receives the platform's log (default: none); Progress the slow first-start steps
	// for a human (default: none).
	Logger   *slog.Logger
	Progress io.Writer
	// Quota caps each namespace (tenant) on this host; a zero field: no cap.
	Quota Quota
	// AllowBrokers are HOST:PORT a rabbitmq trigger may connect to although they are this host's
	// or outside the namespace's egress (a broker on the host itself).
	AllowBrokers []string
	// Autoscale changes the decider's windows (autoscale.WithStableWindow, WithPanicWindow);
	// AutoscaleTick is how often every function is looked at (default 1 s).
	Autoscale     []autoscale.Option
	AutoscaleTick time.Duration
}

// Quota is what one namespace may have on this host at once, as a tenant's ResourceQuota bounds
// it on Kubernetes.
type Quota struct {
	// Functions it may hold: a create beyond is 403 quota_exceeded (checked in the state file's
	// transaction that stores the function).
	Functions int
	// MemoryMB its running function, job and cron containers may have in all (their memory
	// limits): a function beyond fails to start, with the reason in its status, and is retried; a
	// job or cron run beyond waits (a job shows Pending with the reason) for memory to be freed.
	// One that alone needs more fails at once.
	MemoryMB int
	// Runs is how many job and cron runs it may have going: one beyond waits for one to end
	// (a cron time that passes meanwhile folds into the waiting run, as concurrencyPolicy Forbid).
	Runs int
}

// Platform is one single-host sless: state, registry, build pipeline, runner, controller.
type Platform struct {
	cfg      Config
	instance string
	log      *slog.Logger
	db       *state.DB
	secrets  *state.Secrets
	reg      *registry.Server
	keys     *regauth.Keys
	nets     *network.Networks
	proxy    *indexproxy.Server
	code     *codestore.Dir
	builder  *oci.Builder
	pm       *podman.Client
	run      *runner.Runner
	uids     *uidRanges
	ctrl     *controller
	mq       *consumers
	egress   *egress

	stopGuard context.CancelFunc
	restored  *prometheus.CounterVec

	ready    atomic.Bool
	readyErr atomic.Value // string
	// images are the runtime images Run installed (runtime name → image by digest).
	images atomic.Pointer[map[string]string]
}

// Open prepares the platform: state, registry, code store, builder, podman. It does no slow work;
// Run installs the runtimes and starts the controller.
func Open(ctx context.Context, cfg Config) (*Platform, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("local: DataDir is required")
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = abs
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.PodmanRoot == "" {
		cfg.PodmanRoot = filepath.Join(cfg.DataDir, "podman")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	p := &Platform{cfg: cfg, instance: instanceID(cfg.DataDir), log: cfg.Logger,
		restored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_confinement_restored_total",
			Help: "Parts of the network confinement found missing or changed and put back (part: bridge, br_netfilter, ipv6, iptables, ip6tables)."}, []string{"part"})}
	p.readyErr.Store("installing runtime images")
	p.ctrl = newController(p)
	p.mq = newConsumers(p)
	if p.ctrl.scaler, err = newAutoscaler(p.ctrl, cfg.Autoscale, cmp.Or(cfg.AutoscaleTick, time.Second)); err != nil {
		return nil, err
	}
	if p.db, err = state.Open(filepath.Join(cfg.DataDir, "state.db"), p.ctrl.changed); err != nil {
		return nil, err
	}
	p.db.SetMaxFunctions(cfg.Quota.Functions)
	p.egress = &egress{p: p, choices: p.db.EgressChoices()}
	fail := func(err error) (*Platform, error) { p.Close(); return nil, err }
	key, err := state.LoadSecretKey(cmp.Or(cfg.SecretsKeyFile, filepath.Join(cfg.DataDir, "secrets.key")))
	if err != nil {
		return fail(err)
	}
	p.secrets, err = p.db.OpenSecrets(key)
	clear(key)
	if err != nil {
		return fail(err)
	}
	// Tenant code gets networks of the instance's own: no host service, no other container, no
	// metadata address; installs reach only the index proxy on their gateway.
	if p.nets, err = network.Plan(p.instance, cfg.DataDir, cfg.Subnet); err != nil {
		return fail(err)
	}
	if err := p.nets.Create(ctx); err != nil {
		return fail(err)
	}
	ix, err := indexproxy.New([]string{cfg.PipIndexURL, cfg.NPMRegistry},
		append(indexproxy.PublicHosts(cfg.PipIndexURL, cfg.NPMRegistry), cfg.IndexHosts...), cfg.Logger)
	if err != nil {
		return fail(err)
	}
	if p.proxy, err = indexproxy.Listen(netip.AddrPortFrom(p.nets.Deps.Gateway, 0).String(), ix); err != nil {
		return fail(err)
	}
	p.nets.OnRestore = p.confinementRestored
	if err := p.confine(ctx); err != nil {
		return fail(err)
	}
	guardCtx, stopGuard := context.WithCancel(context.Background())
	p.stopGuard = stopGuard
	go p.nets.Guard(guardCtx, cmp.Or(cfg.GuardInterval, 2*time.Second), func(err error) {
		p.log.Error("the network confinement could not be checked or restored; no container starts until it is", "err", err)
	})
	if p.pm, err = podman.New(cfg.DataDir, cfg.PodmanRoot, network.ConfDir(cfg.DataDir)); err != nil {
		return fail(err)
	}
	p.pm.Gate(p.nets.Ensure)
	p.run = runner.New(p.pm, p.instance, cfg.DataDir, p.nets.Functions.Name)
	if err := p.run.PrepareRunDir(); err != nil {
		return fail(err)
	}
	p.uids = newUIDRanges(p.db, p.run.List, p.log)
	p.pm.GuardIDs(p.uids.guard)
	p.run.SetLimits(runner.Limits{MemoryMB: cfg.Quota.MemoryMB, Runs: cfg.Quota.Runs})
	p.run.SetAddresses(func(id string) (netip.Addr, bool) { return p.nets.Address(p.nets.Functions, id) })
	// Each container's namespace is known to the chains by its MAC (local/network: egress.go),
	// entered before the container exists; those of running containers again after a restart.
	p.run.SetRegister(func(ctx context.Context, ns, name string) (string, error) {
		mac := network.NewMAC()
		return mac, p.nets.Register(ctx, name, ns, mac)
	}, p.nets.Unregister)
	regs, err := p.run.Registrations(ctx)
	if err != nil {
		return fail(err)
	}
	members := map[string]network.Member{}
	for name, r := range regs {
		members[name] = network.Member{MAC: r.MAC, Namespace: r.Namespace}
	}
	if err := p.nets.Sync(ctx, members); err != nil {
		return fail(err)
	}
	if p.code, err = codestore.NewDir(filepath.Join(cfg.DataDir, "code")); err != nil {
		return fail(err)
	}
	// The registry's keys persist with the data: a restart keeps every credential valid.
	authDir := filepath.Join(cfg.DataDir, "registry-auth")
	if p.keys, err = regauth.LoadOrCreate(authDir); err != nil {
		return fail(err)
	}
	if p.reg, err = registry.Start(ctx, registry.Config{RootDir: filepath.Join(cfg.DataDir, "registry"), Addr: cfg.RegistryListen, Auth: p.keys,
		SweepAtStart: true}); err != nil { // blobs of collected images go here: nothing uploads yet
		return fail(err)
	}
	// podman pulls with the platform's credential, and so can a user's crane (DOCKER_CONFIG).
	// Rewritten on every start: the registry's port may differ.
	if err := os.WriteFile(filepath.Join(authDir, "config.json"), p.keys.Platform().DockerConfigJSON(p.reg.Addr()), 0o600); err != nil {
		return fail(err)
	}
	p.pm.UseAuthFile(filepath.Join(authDir, "config.json"))
	if p.builder, err = oci.NewBuilder(oci.WithKeychain(p.RegistryKeychain())); err != nil {
		return fail(err)
	}
	return p, nil
}

// Collectors are the platform's own metrics, for the API's /metrics.
func (p *Platform) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{p.restored}, p.mq.metrics.Collectors()...)
}

func (p *Platform) confinementRestored(r network.Restored) {
	p.log.Warn("network confinement restored: it was missing or changed", "part", r.Part, "detail", r.Detail)
	p.restored.WithLabelValues(r.Part).Inc()
}

// Deliveries counts what becomes of events (sless_deliveries_total, among Collectors): the rabbitmq
// triggers' here, and the API's asynchronous invocations (api.WithDeliveryMetrics).
func (p *Platform) Deliveries() *delivery.Metrics { return p.mq.metrics }

// Backend is what the API serves from.
func (p *Platform) Backend() objects.Backend {
	return objects.Backend{Namespaces: &namespaces{Namespaces: p.db.Namespaces, p: p}, Functions: p.db.Functions, Triggers: p.db.Triggers,
		Jobs: p.db.Jobs, Secrets: p.secrets, Invocations: p.db.Invocations, Code: p.code, Resolver: p.run, Instances: source{p.run, p.ctrl.scaler}, Scaler: p.ctrl.scaler,
		Logs: p.run, Egress: p.egress, RuntimeImages: p, Async: p.db.Async, TriggerTypes: []apiv1.TriggerType{apiv1.TriggerHTTP, apiv1.TriggerCron, apiv1.TriggerRabbitMQ}}
}

// RuntimeImage is the image by digest functions of runtime rt are built on here: none before Run
// installed the runtime images (objects.RuntimeImages).
func (p *Platform) RuntimeImage(rt string) (string, bool) {
	images := p.images.Load()
	if images == nil {
		return "", false
	}
	ref, ok := (*images)[rt]
	return ref, ok
}

var _ objects.RuntimeImages = (*Platform)(nil)

// source is the runner's instances, and the autoscaler's word on whether the quota stops a
// function's scale-up (activator.ScaleLimiter).
type source struct {
	*runner.Runner
	scaler *autoscaler
}

func (s source) ScaleLimited(_ context.Context, ns, name string) bool {
	return s.scaler.isLimited(ns + "/" + name)
}

// UseLoads gives the autoscaler what /fn/'s activator sees (api.Server.Activator().Loads): the
// requests in flight and held per function and instance.
func (p *Platform) UseLoads(loads func() []activator.Load) { p.ctrl.scaler.setLoads(loads) }

// RegistryAddr is the embedded registry's host:port.
func (p *Platform) RegistryAddr() string { return p.reg.Addr() }

// RegistryKeychain holds the platform's credential for the embedded registry (which serves
// nothing anonymously).
func (p *Platform) RegistryKeychain() authn.Keychain { return p.keys.Platform().Keychain(p.reg.Addr()) }

// RegistryConfigDir is a DOCKER_CONFIG directory with the platform's credential, for crane.
func (p *Platform) RegistryConfigDir() string { return filepath.Join(p.cfg.DataDir, "registry-auth") }

// Instance is the label value on this platform's containers (a hash of the data dir).
func (p *Platform) Instance() string { return p.instance }

// Ready reports whether runtime images are installed and the controller runs.
func (p *Platform) Ready(context.Context) error {
	if p.ready.Load() {
		return nil
	}
	return errors.New(p.readyErr.Load().(string))
}

// NotReady says why the platform is not ready yet (shown by /readyz until Run is).
func (p *Platform) NotReady(reason string) { p.readyErr.Store(reason) }

// Run installs the runtime images, restores every function, trigger and job, and runs the
// controller until ctx ends. Function containers keep running afterwards; the next Run adopts them.
func (p *Platform) Run(ctx context.Context) error {
	images, err := runtimeimages.Install(ctx, p.builder, p.reg.Addr(), p.cfg.BasesDir, p.progress, remote.WithAuthFromKeychain(p.RegistryKeychain()))
	if err != nil {
		p.readyErr.Store(err.Error())
		return err
	}
	p.images.Store(&images)
	store, err := deps.NewRegistryStore(p.reg.Addr()+"/sless/deps", remote.WithAuthFromKeychain(p.RegistryKeychain()))
	if err != nil {
		return err
	}
	pipeline, err := build.New(p.code, p.builder, build.WithRegistry(p.reg.Addr()), build.WithRuntimes(images),
		build.WithDeps(deps.NewCache(store, &depsResolver{p: p}, p.db, p.cfg.DataDir)),
		// Installers get the indexes without credentials: the proxy adds them upstream.
		build.WithIndex("python", indexproxy.Sanitize(p.cfg.PipIndexURL)), build.WithIndex("node", indexproxy.Sanitize(p.cfg.NPMRegistry)),
		build.WithObserver(p.observeBuild), build.WithTempDir(p.cfg.DataDir))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.db.Invocations.FlushLoop(ctx, time.Second) }()
	if err := p.ctrl.start(ctx, pipeline); err != nil {
		return err
	}
	p.ready.Store(true)
	p.log.Info("ready", "registry", p.reg.Addr(), "instance", p.instance)
	<-ctx.Done()
	p.ctrl.stop()
	p.mq.stopAll()
	wg.Wait()
	return nil
}

// Close releases the state file and stops the registry (call after Run returns).
func (p *Platform) Close() error {
	if p.stopGuard != nil {
		p.stopGuard()
	}
	var errs []error
	if p.reg != nil {
		errs = append(errs, p.reg.Close())
	}
	if p.proxy != nil {
		errs = append(errs, p.proxy.Close())
	}
	if p.db != nil {
		errs = append(errs, p.db.Close())
	}
	return errors.Join(errs...)
}

// proxyPort is the index proxy's port on the deps gateway.
func (p *Platform) proxyPort() int {
	ap, _ := netip.ParseAddrPort(p.proxy.Addr())
	return int(ap.Port())
}

// instanceID names the instance of the data dir at abs path dataDir (its containers' label).
func instanceID(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:])[:12]
}

// Down removes what an instance left running on the host: its containers (which outlive sless
// up by design), what they were handed on the tmpfs (runner.RunDir), its networks and its
// firewall chain. The data dir itself stays.
func Down(ctx context.Context, dataDir, podmanRoot string) error {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	instance := instanceID(abs)
	if podmanRoot == "" {
		podmanRoot = filepath.Join(abs, "podman")
	}
	pm, err := podman.New(abs, podmanRoot, network.ConfDir(abs))
	if err != nil {
		return err
	}
	var errs []error
	removed := true
	for _, label := range []string{runspec.LabelInstance, "dev.sless.instance"} {
		if _, err := pm.Run(ctx, "rm", "-f", "-t", "0", "--filter", "label="+label+"="+instance); err != nil {
			errs, removed = append(errs, err), false
		}
	}
	if _, err := os.Stat(filepath.Join(network.ConfDir(abs), "subnet")); err == nil {
		nets, err := network.Plan(instance, abs, netip.Prefix{})
		if err == nil {
			err = nets.Remove(ctx)
		}
		errs = append(errs, err)
	}
	if removed {
		// The containers are gone: nothing reads what they were handed (their env and secret files).
		errs = append(errs, runner.RemoveRunDir(instance))
	}
	return errors.Join(errs...)
}

func (p *Platform) progress(format string, args ...any) {
	fmt.Fprintf(p.cfg.Progress, "sless up: "+format+"\n", args...)
}

// namespaces is the state's namespace set; deleting one (the API refuses while it has functions)
// also removes the job and cron containers its triggers and jobs left.
type namespaces struct {
	*state.Namespaces
	p *Platform
}

func (n *namespaces) Delete(ctx context.Context, ns string) error {
	if err := n.Namespaces.Delete(ctx, ns); err != nil {
		return err
	}
	// Installs stay: another tenant's build may wait for the same dependency key.
	n.p.run.RemoveWhere(ctx, 5, func(c runner.Container) bool {
		role := runspec.Role(c.Labels[runspec.LabelRole])
		return c.Labels[runspec.LabelNamespace] == ns && role != runspec.RoleFunction && role != runspec.RoleDeps
	})
	return nil
}

// observeBuild passes a finished build on to the configured observer.
func (p *Platform) observeBuild(o build.Observation) {
	if p.cfg.ObserveBuild != nil {
		p.cfg.ObserveBuild(o)
	}
}
