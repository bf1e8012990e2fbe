package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/internal/registry"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// Config is what `sless up` passes in; only cmd/ reads flags and the environment.
type Config struct {
	// DataDir holds the state file, the registry, the code store and podman's config.
	DataDir string
	// RegistryListen is where the embedded registry listens ("127.0.0.1:5000").
	RegistryListen string
	// PodmanRoot is podman's storage (shared between instances, so base layers are pulled once).
	PodmanRoot string
	// BasesDir holds the language base image layouts (hack/build-bases.sh); BasesScript makes them
	// when missing (empty: fail with instructions instead).
	BasesDir    string
	BasesScript string
	// PublicURL is the API's base URL as users reach it, for status.url.
	PublicURL string
	// Clock drives cron triggers. The default is the real clock.
	Clock Clock
	// PipIndexURL and NPMRegistry are the package indexes dependency installs use; empty means
	// pip's and npm's defaults.
	PipIndexURL, NPMRegistry string
	// DepsCAFile is a CA bundle mounted into dependency installs (pip, npm), for indexes behind a
	// TLS proxy or with a private CA. Empty: the runtime image's own bundle.
	DepsCAFile string
	// Logger receives the platform's log; Progress the slow first-start steps for a human.
	Logger   *slog.Logger
	Progress io.Writer
}

// Platform is one single-host sless: state, registry, builder, runner.
type Platform struct {
	cfg      Config
	db       *bolt.DB
	reg      *registry.Server
	regHost  string
	code     *codestore.Dir
	builder  *oci.Builder
	podman   *podman
	instance string
	log      *slog.Logger

	functions *boltStore[apiv1.Function]
	triggers  *boltStore[apiv1.Trigger]
	jobs      *boltStore[apiv1.Job]
	nss       *namespaces
	inv       *invocations

	runtimes map[string]string // runtime name -> runtime image by digest
	ready    atomic.Bool
	readyErr atomic.Value // string

	mu     sync.RWMutex
	routes map[string]*instance // "ns/name" -> serving container

	queue    *queue
	sched    *scheduler
	deps     *deps.Cache
	depsRuns atomic.Int64
	wg       sync.WaitGroup
	jobWG    sync.WaitGroup
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
		cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
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
	sum := sha256.Sum256([]byte(cfg.DataDir))
	p := &Platform{cfg: cfg, instance: hex.EncodeToString(sum[:])[:12], log: cfg.Logger,
		runtimes: map[string]string{}, routes: map[string]*instance{}, queue: newQueue()}
	p.readyErr.Store("installing runtime images")
	if p.db, err = openDB(filepath.Join(cfg.DataDir, "state.db")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Platform, error) { p.Close(); return nil, err }
	if p.podman, err = newPodman(cfg.DataDir, cfg.PodmanRoot); err != nil {
		return fail(err)
	}
	if p.code, err = codestore.NewDir(filepath.Join(cfg.DataDir, "code")); err != nil {
		return fail(err)
	}
	if p.reg, err = registry.Start(ctx, registry.Config{RootDir: filepath.Join(cfg.DataDir, "registry"), Addr: cfg.RegistryListen}); err != nil {
		return fail(err)
	}
	p.regHost = p.reg.Addr()
	if p.builder, err = oci.NewBuilder(); err != nil {
		return fail(err)
	}
	if p.inv, err = loadInvocations(p.db); err != nil {
		return fail(err)
	}
	p.functions = &boltStore[apiv1.Function]{db: p.db, bucket: bucketFunctions, name: func(f apiv1.Function) string { return f.Name },
		notify: func(ns, name string) { p.queue.add("fn/" + ns + "/" + name) }}
	p.triggers = &boltStore[apiv1.Trigger]{db: p.db, bucket: bucketTriggers, name: func(t apiv1.Trigger) string { return t.Name },
		notify: func(ns, _ string) { p.enqueueNamespace(ns) }}
	p.jobs = &boltStore[apiv1.Job]{db: p.db, bucket: bucketJobs, name: func(j apiv1.Job) string { return j.Name },
		notify: func(ns, name string) { p.queue.add("job/" + ns + "/" + name) }}
	p.nss = &namespaces{db: p.db}
	p.sched = newScheduler(p)
	store, err := deps.NewRegistryStore(p.regHost + "/sless/deps")
	if err != nil {
		return fail(err)
	}
	p.deps = deps.NewCache(store, depsResolver{p}, cfg.DataDir)
	return p, nil
}

// Backend is what the API serves from.
func (p *Platform) Backend() api.Backend {
	return api.Backend{Namespaces: p.nss, Functions: p.functions, Triggers: p.triggers, Jobs: p.jobs,
		Invocations: p.inv, Code: p.code, Resolver: p}
}

// RegistryAddr is the embedded registry's host:port.
func (p *Platform) RegistryAddr() string { return p.regHost }

// Instance is the label value on this platform's containers (a hash of the data dir).
func (p *Platform) Instance() string { return p.instance }

// Ready reports whether runtime images are installed and the controller runs.
func (p *Platform) Ready(context.Context) error {
	if p.ready.Load() {
		return nil
	}
	return errors.New(p.readyErr.Load().(string))
}

// Run installs the runtime images, restores every function, trigger and job, and runs the
// controller until ctx ends. Function containers keep running afterwards; the next Run adopts them.
func (p *Platform) Run(ctx context.Context) error {
	if err := p.installRuntimes(ctx); err != nil {
		p.readyErr.Store(err.Error())
		return err
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.inv.flushLoop(ctx, time.Second) }()
	for i := 0; i < 2; i++ {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.worker(ctx) }()
	}
	if err := p.recover(ctx); err != nil {
		return err
	}
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.sched.run(ctx) }()
	go func() { defer p.wg.Done(); p.resync(ctx) }()
	p.ready.Store(true)
	p.log.Info("ready", "registry", p.regHost, "instance", p.instance)
	<-ctx.Done()
	p.queue.close()
	p.wg.Wait()
	p.jobWG.Wait()
	return nil
}

// Close releases the state file and stops the registry (call after Run returns).
func (p *Platform) Close() error {
	var errs []error
	if p.reg != nil {
		errs = append(errs, p.reg.Close())
	}
	if p.db != nil {
		errs = append(errs, p.db.Close())
	}
	return errors.Join(errs...)
}

// Resolve routes /fn/ to the function's healthy container.
func (p *Platform) Resolve(_ context.Context, ns, name string) (*url.URL, error) {
	p.mu.RLock()
	inst := p.routes[ns+"/"+name]
	p.mu.RUnlock()
	if inst == nil {
		return nil, &api.NotReadyError{Reason: fmt.Sprintf("function %q has no running instance yet", name)}
	}
	return inst.url, nil
}

func (p *Platform) progress(format string, args ...any) {
	fmt.Fprintf(p.cfg.Progress, "sless up: "+format+"\n", args...)
}

// installRuntimes pushes the language bases into the registry and builds the runtime images on
// them. Deterministic: the same bases and servers give the same digests on every start, so
// functions are not rebuilt needlessly.
func (p *Platform) installRuntimes(ctx context.Context) error {
	for _, rtName := range runtimes.Names() {
		rt, _ := runtimes.Lookup(rtName)
		dir := filepath.Join(p.cfg.BasesDir, rtName)
		if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
			if err := p.buildBase(ctx, rtName); err != nil {
				return err
			}
		}
		lp, err := layout.FromPath(dir)
		if err != nil {
			return fmt.Errorf("reading base %s: %w", dir, err)
		}
		idx, err := lp.ImageIndex()
		if err != nil {
			return err
		}
		im, err := idx.IndexManifest()
		if err != nil || len(im.Manifests) == 0 {
			return fmt.Errorf("base layout %s holds no image (%v)", dir, err)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			return err
		}
		baseRef, _ := name.ParseReference(p.regHost + "/sless/base-" + rtName + ":latest")
		if desc, err := remote.Head(baseRef); err != nil || desc.Digest != im.Manifests[0].Digest {
			p.progress("installing the %s base image into the registry", rtName)
			if err := remote.Write(baseRef, img, remote.WithContext(ctx)); err != nil {
				return fmt.Errorf("pushing the %s base: %w", rtName, err)
			}
		}
		res, err := p.builder.BuildRuntime(ctx, oci.RuntimeSource{Base: baseRef.String(), Name: rt.Name, Files: rt.Files(), Dir: "/app", Cmd: rt.Cmd, Env: rt.Env})
		if err != nil {
			return fmt.Errorf("building the %s runtime image: %w", rtName, err)
		}
		ref, err := p.builder.Push(ctx, res, p.regHost+"/sless/runtime-"+rtName+":latest")
		res.Close()
		if err != nil {
			return fmt.Errorf("pushing the %s runtime image: %w", rtName, err)
		}
		p.runtimes[rtName] = ref.String()
		p.progress("runtime %s: %s", rtName, ref)
	}
	return nil
}

func (p *Platform) buildBase(ctx context.Context, rt string) error {
	if p.cfg.BasesScript == "" {
		return fmt.Errorf("the %s base image is missing from %s; build it with hack/build-bases.sh %s", rt, p.cfg.BasesDir, rt)
	}
	p.readyErr.Store("building the " + rt + " base image (first start only; a few minutes)")
	p.progress("building the %s base image from Debian packages (first start only, a few minutes)…", rt)
	cmd := exec.CommandContext(ctx, "bash", p.cfg.BasesScript, rt)
	cmd.Stdout, cmd.Stderr = io.Discard, p.cfg.Progress
	cmd.Env = append(os.Environ(), "SLESS_CACHE="+filepath.Dir(p.cfg.BasesDir))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the %s base with %s: %w", rt, p.cfg.BasesScript, err)
	}
	return nil
}

// enqueueNamespace reconciles every function of ns (a trigger changed: the scaling rule may flip).
func (p *Platform) enqueueNamespace(ns string) {
	fns, err := p.functions.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, f := range fns {
		p.queue.add("fn/" + ns + "/" + f.Name)
	}
}
