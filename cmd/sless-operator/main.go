package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/ptr"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/pgstore"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/indexproxy"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/invoke"
	"github.com/sless-dev/sless/oci"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sless-operator:", err)
		os.Exit(1)
	}
}

type runtimeFlags map[string]string

func (r runtimeFlags) String() string { return fmt.Sprint(map[string]string(r)) }
func (r runtimeFlags) Set(v string) error {
	k, ref, ok := strings.Cut(v, "=")
	if !ok {
		return errors.New("want NAME=IMAGE@sha256:…")
	}
	r[k] = ref
	return nil
}

// config is what the flags say.
type config struct {
	listen, publicURL, registry                  string
	fnDomain                                     string
	uploadRate                                   float64
	uploadBurst, workers, tenantBuilds, maxHeld  int
	autoscale                                    bool
	leaderElect                                  bool
	stableWindow, panicWindow                    time.Duration
	insecure                                     bool
	codeDir, s3Endpoint, s3Bucket, s3Region      string
	jwks, pubKey, secretFile                     string
	jwtIssuer, jwtAudience                       string
	anyAudience                                  bool
	operatorNS, pullSecret, registryAuthDir      string
	builds                                       int
	operatorImage, pipIndex, npmRegistry, egress string
	indexProxy                                   string
	loadsListen, loadsService                    string
	indexHosts                                   []string
	policyGate                                   bool
	role                                         string
	drainTimeout, shutdownDelay                  time.Duration
	databaseURL                                  string
	retention                                    time.Duration
	runtimes                                     runtimeFlags
	quota                                        resources.TenantQuota

	// Set by loadRegistryAuth.
	keychain   authn.Keychain
	tenantPull func(ns string) []byte
	depsPush   func(key string) []byte
}

func parseFlags(args []string) (*config, error) {
	c := &config{runtimes: runtimeFlags{}, quota: resources.DefaultTenantQuota}
	fs := flag.NewFlagSet("sless-operator", flag.ContinueOnError)
	fs.StringVar(&c.role, "role", roleAll, "what this process runs: "+roleAPI+" (the REST API and /fn/: stateless, as many replicas as you like), "+roleController+" (the reconcilers, the autoscaler and the index proxy, active on the leader of the Lease only) or "+roleAll+" (both in one process)")
	fs.StringVar(&c.listen, "listen", ":8080", "REST API and /fn/ address (with --role=controller: /healthz, /readyz and /metrics only)")
	// The URL carries a password: from the environment (a Secret), never from argv.
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL (≥ 14) keeping the invocation history of /fn/, shared by every API replica (default: $DATABASE_URL; the schema is migrated at start); empty: each replica keeps the last 1,000 per function in memory")
	fs.DurationVar(&c.retention, "invocation-retention", 7*24*time.Hour, "invocation records older than this are deleted (with --database-url)")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay-duration", 0, "on SIGTERM, keep serving this long with /readyz failing before closing the listener (as kube-apiserver's flag): for load balancers that learn of a stopping replica only from its readiness (on Kubernetes the pod's preStop sleep does this)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 15*time.Minute, "on SIGTERM, how long the requests in flight (a function may run up to 15 min) may take to finish before the process exits; keep the pod's terminationGracePeriodSeconds above it")
	fs.StringVar(&c.publicURL, "public-url", "http://127.0.0.1:8080", "base URL users reach the API at")
	fs.StringVar(&c.fnDomain, "fn-domain", "", "also serve each function at its own origin https://<name>--<namespace>.<domain>/ (point a wildcard DNS record and certificate at the API; no host below it serves the API). Use a domain of its own, ideally on the Public Suffix List")
	fs.StringVar(&c.registry, "registry", "", "registry host[:port] function images are pushed to (required)")
	fs.BoolVar(&c.insecure, "insecure-registry", false, "plain HTTP to the registry")
	fs.StringVar(&c.codeDir, "code-dir", "", "code store directory (or the S3 flags)")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", "", "S3 endpoint of the code store")
	fs.StringVar(&c.s3Bucket, "s3-bucket", "", "S3 bucket of the code store")
	fs.StringVar(&c.s3Region, "s3-region", "us-east-1", "S3 region")
	fs.StringVar(&c.jwks, "jwks-url", "", "verify tokens with this JWKS URL")
	fs.StringVar(&c.pubKey, "jwt-public-key", "", "verify tokens with this PEM public key file")
	fs.StringVar(&c.secretFile, "hs256-secret-file", "", "verify HS256 tokens with the secret in this file (development)")
	fs.StringVar(&c.jwtIssuer, "jwt-issuer", "", "required iss claim")
	fs.StringVar(&c.jwtAudience, "jwt-audience", "", "required aud claim (required with --jwks-url unless --allow-any-audience)")
	fs.BoolVar(&c.anyAudience, "allow-any-audience", false, "with --jwks-url and no --jwt-audience, accept tokens the identity provider issued to any application")
	fs.StringVar(&c.operatorNS, "operator-namespace", "sless-system", "namespace the operator (and the /fn/ proxy) runs in")
	fs.StringVar(&c.registryAuthDir, "registry-auth-dir", "", "the keys of sless's registry (the sless-registry-auth Secret: "+regauth.SigningKeyFile+", "+regauth.SecretFile+"): the operator pushes as the platform, each tenant namespace gets a pull-only credential for its own repositories, each deps Job a push credential for its key")
	fs.StringVar(&c.pullSecret, "pull-secret-file", "", "with a registry of your own instead of --registry-auth-dir: .dockerconfigjson copied into every tenant namespace as sless-registry and given to deps Jobs' push step (it must pull function images and push <registry>/sless/deps/*); the operator pushes with DOCKER_CONFIG")
	fs.IntVar(&c.builds, "max-builds", 2, "concurrent in-process builds")
	fs.IntVar(&c.tenantBuilds, "max-builds-per-namespace", 1, "concurrent in-process builds of one namespace (a build that finds none free waits without holding a worker)")
	fs.IntVar(&c.workers, "max-concurrent-reconciles", 4, "Functions reconciled at once (builds beyond --max-builds wait without holding one)")
	fs.Float64Var(&c.uploadRate, "upload-rate", api.DefaultUploadsPerMinute, "code uploads a namespace may make per minute on average (429 throttled beyond; 0 for no limit)")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "run the controllers and the autoscaler only while holding the Lease sless-operator.sless.dev in --operator-namespace, so that two operator pods (a rollout, a second replica) never reconcile or scale at once; the REST API and /fn/ serve on every pod")
	fs.BoolVar(&c.autoscale, "autoscale", true, "scale each function between its min_replicas and max_replicas on its load through /fn/ (false: one instance per function)")
	fs.DurationVar(&c.stableWindow, "autoscale-stable-window", autoscale.DefaultStableWindow, "the load is averaged over this window to decide replicas")
	fs.DurationVar(&c.panicWindow, "autoscale-panic-window", autoscale.DefaultPanicWindow, "a load of twice the capacity over this window scales up at once")
	fs.StringVar(&c.loadsListen, "loads-listen", ":9090", "serve this replica's /fn/ load to the autoscaler on this internal address (port \"loads\" of the --loads-service Service, which routes nothing public); empty: none")
	fs.StringVar(&c.loadsService, "loads-service", "sless-api-loads", "the Service in --operator-namespace whose EndpointSlices list the /fn/ replicas the autoscaler reads (port \"loads\"; it must carry the label app.kubernetes.io/managed-by=sless-operator)")
	fs.IntVar(&c.maxHeld, "max-held", api.DefaultMaxHeld, "requests of one function /fn/ holds while every instance is busy or none is ready yet (429 throttled beyond)")
	fs.IntVar(&c.uploadBurst, "upload-burst", api.DefaultUploadBurst, "code uploads a namespace may make at once above --upload-rate")
	fs.StringVar(&c.operatorImage, "operator-image", "", "this operator's image (by digest): deps Jobs run its `sless deps push`; empty refuses functions with dependencies")
	// Index URLs may carry credentials: from the environment (a Secret), never from argv.
	// Not as the flags' defaults: a usage message would print them.
	fs.StringVar(&c.pipIndex, "pip-index-url", "", "package index for pip installs in deps Jobs (default: $PIP_INDEX_URL, else the runtime's); credentials in it go in the environment, not here")
	fs.StringVar(&c.npmRegistry, "npm-registry", "", "npm registry for npm installs in deps Jobs (default: $NPM_REGISTRY, else the runtime's); credentials in it go in the environment, not here")
	fs.StringVar(&c.egress, "deps-egress", "", "comma-separated CIDR or CIDR:PORT deps Job pods may reach besides DNS and the index proxy (the registry, for their push step), for tenant NetworkPolicies")
	fs.BoolVar(&c.policyGate, "wait-for-network-policy", false, "start every pod of tenant code with --operator-image's `sless policy-wait`, so none of its code runs before its NetworkPolicy is in force (needs an enforcing NetworkPolicy implementation)")
	fs.StringVar(&c.indexProxy, "index-proxy-listen", "", "serve the index proxy deps Jobs' installers go through (e.g. :3128, behind the sless-index-proxy Service); empty: installers reach the indexes directly")
	fs.Func("index-host", "a host (host[:port]) installers may reach through the index proxy besides the indexes' own (repeatable)", func(v string) error {
		c.indexHosts = append(c.indexHosts, v)
		return nil
	})
	fs.Var(c.runtimes, "runtime", "NAME=IMAGE@sha256:… (repeatable): runtime images by digest")
	// Each tenant namespace's ResourceQuota (and LimitRange); ensure brings existing tenants to new values.
	fs.Var(quantityFlag{&c.quota.CPU}, "tenant-quota-cpu", "CPU limits (and requests) a tenant namespace's pods may have in all (limits.cpu, requests.cpu)")
	fs.Var(quantityFlag{&c.quota.Memory}, "tenant-quota-memory", "memory limits a tenant namespace's pods may have in all (limits.memory)")
	fs.Var(quantityFlag{&c.quota.EphemeralStorage}, "tenant-quota-ephemeral-storage", "local disk a tenant namespace's pods may request and use in all (requests.ephemeral-storage, limits.ephemeral-storage)")
	fs.Int64Var(&c.quota.Pods, "tenant-quota-pods", c.quota.Pods, "pods a tenant namespace may have (pods)")
	fs.Int64Var(&c.quota.Functions, "tenant-quota-functions", c.quota.Functions, "functions a tenant namespace may hold (count/functions.sless.dev); a create beyond is 403 quota_exceeded")
	fs.Var(quantityFlag{&c.quota.ContainerCPU}, "tenant-container-cpu", "CPU limit of a tenant container that sets none, and the most one may set (the LimitRange)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, v := range []struct {
		dst *string
		env string
	}{{&c.pipIndex, "PIP_INDEX_URL"}, {&c.npmRegistry, "NPM_REGISTRY"}, {&c.databaseURL, "DATABASE_URL"}} {
		if *v.dst == "" {
			*v.dst = os.Getenv(v.env)
		}
	}
	for _, q := range []resource.Quantity{c.quota.CPU, c.quota.Memory, c.quota.EphemeralStorage, c.quota.ContainerCPU,
		*resource.NewQuantity(c.quota.Pods, resource.DecimalSI), *resource.NewQuantity(c.quota.Functions, resource.DecimalSI)} {
		if q.Sign() <= 0 {
			return nil, errors.New("the --tenant-quota-* and --tenant-container-cpu values must be positive")
		}
	}
	if c.role != roleAll && c.role != roleAPI && c.role != roleController {
		return nil, fmt.Errorf("--role %q: want %s, %s or %s", c.role, roleAPI, roleController, roleAll)
	}
	if c.registry == "" || len(c.runtimes) == 0 {
		return nil, errors.New("--registry and at least one --runtime are required")
	}
	if c.policyGate && c.operatorImage == "" {
		return nil, errors.New("--wait-for-network-policy runs --operator-image's sless: give both")
	}
	if c.registryAuthDir != "" && c.pullSecret != "" {
		return nil, errors.New("--registry-auth-dir (sless's registry) and --pull-secret-file (your own) exclude each other")
	}
	return c, nil
}

// Roles of a process (--role).
const (
	roleAll        = "all"
	roleAPI        = "api"
	roleController = "controller"
)

func (c *config) servesAPI() bool       { return c.role != roleController }
func (c *config) runsControllers() bool { return c.role != roleAPI }

func run(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("role", cfg.role)
	// The controllers' and the Scaler's own lines go to the same log (they were dropped).
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	code, err := cfg.codeStore(ctx)
	if err != nil {
		return err
	}
	if err := cfg.loadRegistryAuth(); err != nil {
		return err
	}
	// Only the controllers elect a leader: every API replica serves.
	mgr, err := newManager(cfg.runsControllers() && cfg.leaderElect, cfg.operatorNS)
	if err != nil {
		return err
	}
	endpoints := &kubestore.EndpointResolver{Reader: mgr.GetClient()}
	tenant := resources.TenantConfig{OperatorNamespace: cfg.operatorNS, DockerConfigJSON: cfg.tenantPull,
		DepsEgress: splitList(cfg.egress), IndexProxyPort: cfg.proxyPort(), Quota: cfg.quota}
	builds := build.NewMetrics()
	var scaler *controllers.Scaler
	if cfg.runsControllers() {
		if scaler, err = cfg.setupControllerRole(ctx, mgr, code, endpoints, tenant, builds, logger); err != nil {
			return err
		}
	}

	// The manager's informers feed /fn/ (EndpointSlices, Functions, Triggers): they run until the
	// HTTP servers have drained, not just until the signal.
	mctx, stopManager := context.WithCancel(context.WithoutCancel(ctx))
	defer stopManager()
	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(mctx) }()
	var serve func(context.Context) error
	if cfg.servesAPI() {
		serve, err = cfg.apiServer(ctx, mgr, code, endpoints, tenant, scaler, builds, logger)
	} else {
		serve, err = cfg.controllerServer(mgr, builds, logger)
	}
	if err != nil {
		return err
	}
	serr := make(chan error, 1)
	go func() { serr <- serve(ctx) }()
	select {
	case err := <-errc: // the manager stopped on its own: lost the Lease, or failed
		return err
	case err = <-serr:
	}
	stopManager()
	if merr := <-errc; err == nil && ctx.Err() == nil {
		err = merr
	}
	if ctx.Err() != nil && err == nil {
		logger.Info("stopped")
	}
	return err
}

// setupControllerRole adds the reconcilers, the autoscaler, the index proxy and the pass that
// brings existing tenants to the current configuration.
func (c *config) setupControllerRole(ctx context.Context, mgr ctrl.Manager, code codestore.Store, endpoints *kubestore.EndpointResolver,
	tenant resources.TenantConfig, builds *build.Metrics, logger *slog.Logger) (*controllers.Scaler, error) {
	if c.indexProxy != "" {
		// Installers run tenant code and get no credential: the proxy adds the indexes' upstream.
		// Every controller replica serves it, leader or not (a Service in front).
		p, err := indexproxy.New([]string{c.pipIndex, c.npmRegistry},
			append(indexproxy.PublicHosts(c.pipIndex, c.npmRegistry), c.indexHosts...), logger)
		if err != nil {
			return nil, err
		}
		ps, err := indexproxy.Listen(c.indexProxy, p)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { ps.Close() })
	}
	var scaler *controllers.Scaler
	if c.autoscale {
		decider, err := autoscale.New(autoscale.WithStableWindow(c.stableWindow), autoscale.WithPanicWindow(c.panicWindow))
		if err != nil {
			return nil, err
		}
		// The load of every /fn/ replica, this process's included, read over HTTP: one code path
		// for one replica or many. Pokes come from the same endpoints (WatchPokes) when the API
		// runs apart.
		scaler = controllers.NewScaler(controllers.Scaler{Client: mgr.GetClient(), Instances: endpoints, Decider: decider,
			Loads: &controllers.LoadScraper{Reader: mgr.GetClient(), Namespace: c.operatorNS, Service: c.loadsService}})
		if err := mgr.Add(scaler); err != nil {
			return nil, err
		}
	}
	if err := c.setupControllers(mgr, code, builds.Observe); err != nil {
		return nil, err
	}
	// New quota values, policies and a rotated pull secret reach the tenants that exist already
	// (the leader does it once per start; Ensure writes only what differs).
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	return scaler, mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := kubestore.EnsureTenants(ctx, direct, tenant); err != nil && ctx.Err() == nil {
			logger.Error("bringing tenant namespaces up to date", "error", err)
		}
		return nil
	}))
}

// apiServer makes the REST API and /fn/ (and the internal loads listener); the returned func
// serves until ctx ends, then drains: /readyz fails, new connections are refused, and the
// requests in flight (held cold starts included) finish within --drain-timeout.
func (c *config) apiServer(ctx context.Context, mgr ctrl.Manager, code codestore.Store, endpoints *kubestore.EndpointResolver,
	tenant resources.TenantConfig, scaler *controllers.Scaler, builds *build.Metrics, logger *slog.Logger) (func(context.Context) error, error) {
	verifier, err := c.verifier(ctx, logger)
	if err != nil {
		return nil, err
	}
	// The API reads and writes through a direct client: the manager's cache is eventually
	// consistent (a create followed by a get could miss) and not ready before it syncs.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	// /fn/ goes to ready pods read from the manager's cache of EndpointSlices, not the Service's IP.
	backend := kubestore.New(direct, code, tenant, endpoints)
	backend.Instances = endpoints // /fn/ probes pods that are not ready yet itself
	logs, err := podLogs(mgr.GetConfig(), code)
	if err != nil {
		return nil, err
	}
	backend.Logs = logs
	// A request with no instance waits while the Scaler starts one: poked directly in one process;
	// apart, through /pokes on the loads listener, which the Scaler long-polls on every replica.
	var pokes *invoke.Pokes
	if scaler != nil {
		backend.Scaler = scaler
	} else if c.autoscale {
		pokes = invoke.NewPokes()
		backend.Scaler = pokes
	}
	// /fn/ reads functions and triggers from the manager's cache, not with two API round trips per
	// request; the REST routes keep the direct client for read-after-write.
	backend.Serving = kubestore.ServingView(mgr.GetClient())
	var history *pgstore.Invocations
	if c.databaseURL != "" {
		// Open does not wait for the database: /fn/ serves while it is away (records are buffered,
		// then counted as dropped), and the history answers 503 not_ready meanwhile.
		if history, err = pgstore.Open(ctx, c.databaseURL, pgstore.WithRetention(c.retention), pgstore.WithLogger(logger)); err != nil {
			return nil, err
		}
		backend.Invocations = history
	} else {
		logger.Warn("no --database-url: the invocation history is this replica's own, in memory")
	}
	srv, err := api.New(backend, api.WithVerifier(verifier), api.WithLogger(logger), api.WithPublicURL(c.publicURL), api.WithFunctionDomain(c.fnDomain),
		api.WithUploadRate(c.uploadRate, c.uploadBurst), api.WithMaxHeld(c.maxHeld), api.WithReadiness(cachesSynced(mgr, servingKinds...)))
	if err != nil {
		return nil, err
	}
	srv.Metrics().MustRegister(builds) // the controllers' builds, when they run in this process
	if history != nil {
		srv.Metrics().MustRegister(history)
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return nil, err
	}
	var lln net.Listener
	if c.loadsListen != "" {
		if lln, err = net.Listen("tcp", c.loadsListen); err != nil {
			ln.Close()
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "sless-operator: API and /fn/ on %s\n", ln.Addr())
	return func(ctx context.Context) error {
		// The loads listener outlives the public one: the autoscaler must see the held requests
		// this replica still finishes.
		lctx, stopLoads := context.WithCancel(context.WithoutCancel(ctx))
		lerr := make(chan error, 1)
		if lln != nil {
			go func() {
				lerr <- api.Serve(lctx, api.NewHTTPServer("", srv.LoadsHandler(pokes), logger), lln, time.Second)
			}()
		} else {
			lerr <- nil
		}
		// On the signal /readyz fails at once and answers say Connection: close (clients move to
		// another replica, closing their connections themselves); the listener closes and idle
		// connections go --shutdown-delay-duration later.
		hs := api.NewHTTPServer("", srv.Handler(), logger)
		sctx, shutdown := context.WithCancel(context.WithoutCancel(ctx))
		defer shutdown()
		context.AfterFunc(ctx, func() {
			srv.Drain()
			logger.Info("draining", "delay", c.shutdownDelay.String(), "timeout", c.drainTimeout.String())
			time.AfterFunc(c.shutdownDelay, shutdown)
		})
		err := api.Serve(sctx, hs, ln, c.drainTimeout)
		stopLoads()
		if history != nil {
			// What the drained requests recorded is written before the process goes.
			if cerr := history.Close(); cerr != nil {
				logger.Error("writing the last invocation records", "error", cerr)
			}
		}
		if lerr := <-lerr; err == nil && ctx.Err() == nil && lerr != nil {
			err = fmt.Errorf("serving the loads: %w", lerr)
		}
		return err
	}, nil
}

// controllerServer serves the controller's /healthz, /readyz (the caches synced) and /metrics.
func (c *config) controllerServer(mgr ctrl.Manager, builds *build.Metrics, logger *slog.Logger) (func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(builds, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ready := cachesSynced(mgr)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "sless-operator: controller health and metrics on %s\n", ln.Addr())
	return func(ctx context.Context) error {
		return api.Serve(ctx, api.NewHTTPServer("", mux, logger), ln, time.Second)
	}, nil
}

// loadRegistryAuth decides the registry credentials: derived from sless's registry keys, or
// (a registry of your own) the operator's DOCKER_CONFIG and one pull secret for everyone.
func (c *config) loadRegistryAuth() error {
	if c.registryAuthDir != "" {
		keys, err := regauth.Load(c.registryAuthDir)
		if err != nil {
			return err
		}
		host := registryHost(c.registry)
		c.keychain = keys.Platform().Keychain(host)
		c.tenantPull = func(ns string) []byte { return keys.TenantPull(ns).DockerConfigJSON(host) }
		// Long enough for a pod to be scheduled and its Job's 15-minute deadline.
		c.depsPush = func(key string) []byte { return keys.DepsPush(key, time.Now().Add(time.Hour)).DockerConfigJSON(host) }
		return nil
	}
	shared := []byte(`{"auths":{}}`)
	if c.pullSecret != "" {
		var err error
		if shared, err = os.ReadFile(c.pullSecret); err != nil {
			return err
		}
	}
	c.keychain = authn.DefaultKeychain
	c.tenantPull = func(string) []byte { return shared }
	c.depsPush = func(string) []byte { return shared }
	return nil
}

// proxyURL is where installers reach the index proxy: its Service in the operator's namespace.
func (c *config) proxyURL() string {
	if c.indexProxy == "" {
		return ""
	}
	return fmt.Sprintf("http://%s.%s.svc:%d", resources.IndexProxyService, c.operatorNS, c.proxyPort())
}

// proxyPort is the index proxy's port ("" / 0 when it is off).
func (c *config) proxyPort() int32 {
	if c.indexProxy == "" {
		return 0
	}
	_, port, _ := net.SplitHostPort(c.indexProxy)
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// registryHost is the host[:port] of --registry (which may carry a path).
func registryHost(registry string) string {
	host, _, _ := strings.Cut(registry, "/")
	return host
}

func (c *config) codeStore(ctx context.Context) (codestore.Store, error) {
	switch {
	case c.codeDir != "":
		return codestore.NewDir(c.codeDir)
	case c.s3Bucket != "":
		s3, err := codestore.NewS3(ctx, codestore.S3Config{Bucket: c.s3Bucket, Endpoint: c.s3Endpoint, Region: c.s3Region})
		if err != nil {
			return nil, err
		}
		// A fresh install has no bucket yet; uploads would fail with NoSuchBucket. The controller
		// makes it, retrying in the background: a pod that starts while S3 is away must still
		// serve (the API, /fn/ and the functions that run need no S3).
		if c.runsControllers() {
			go func() {
				for ctx.Err() == nil {
					err := s3.EnsureBucket(ctx)
					if err == nil {
						return
					}
					slog.Warn("creating the code store's bucket; retrying in 5 s", "error", err)
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
					}
				}
			}()
		}
		return s3, nil
	}
	return nil, errors.New("give --code-dir or --s3-bucket")
}

func (c *config) verifier(ctx context.Context, logger *slog.Logger) (*auth.Verifier, error) {
	var opt auth.Option
	switch {
	case c.jwks != "":
		opt = auth.WithJWKS(c.jwks)
	case c.pubKey != "":
		b, err := os.ReadFile(c.pubKey)
		if err != nil {
			return nil, err
		}
		opt = auth.WithPublicKeyPEM(b)
	case c.secretFile != "":
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return nil, err
		}
		opt = auth.WithHS256Secret([]byte(strings.TrimSpace(string(b))))
	default:
		return nil, errors.New("give --jwks-url, --jwt-public-key or --hs256-secret-file")
	}
	// Empty issuer and audience check nothing.
	return auth.New(opt, auth.WithContext(ctx), auth.WithLogger(logger), auth.WithIssuer(c.jwtIssuer), auth.WithAudience(c.jwtAudience),
		auth.WithAnyAudience(c.anyAudience))
}

// leaseName is the Lease the operator pods elect their leader with.
const leaseName = "sless-operator.sless.dev"

func newManager(leaderElect bool, namespace string) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := slessv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	// /fn/ reads EndpointSlices from the cache: only those of sless's Services (slices carry their
	// Service's labels), not every slice in the cluster.
	ours := labels.SelectorFromSet(labels.Set{runspec.LabelManagedBy: runspec.ManagedBy})
	// The log keeper watches pods: only function pods are cached, not every pod in the cluster.
	// (Other pods, a deps Job's, are read from the API server: APIReader.)
	fnPods := labels.SelectorFromSet(labels.Set{runspec.LabelManagedBy: runspec.ManagedBy, runspec.LabelRole: string(runspec.RoleFunction)})
	return ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Label: ours}, &corev1.Pod{}: {Label: fnPods}}},
		// A pod that stops hands the Lease on at once instead of letting it expire (15 s).
		LeaderElection: leaderElect, LeaderElectionID: leaseName, LeaderElectionNamespace: namespace, LeaderElectionReleaseOnCancel: true,
		// A leader that dies without releasing (a node lost) is replaced within 8 s + the standby's
		// retry (1 s, jittered up to 2.2 s) after its last renewal: ≈ 10–12.5 s, under 15 s.
		LeaseDuration: ptr.To(8 * time.Second), RenewDeadline: ptr.To(5 * time.Second), RetryPeriod: ptr.To(1 * time.Second)})
}

// podLogs reads function pods' logs with a client of its own: its rate limiter (raised for
// followers that look for new pods every second) does not slow the API's or the reconcilers' calls.
func podLogs(cfg *rest.Config, code codestore.Store) (*kubestore.Logs, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kubestore.Logs{Pods: cs, Code: code}, nil
}

// setupControllers adds the reconcilers, with the build pipeline they share.
func (c *config) setupControllers(mgr ctrl.Manager, code codestore.Store, observe func(build.Observation)) error {
	builder, err := oci.NewBuilder(oci.WithInsecure(c.insecure), oci.WithKeychain(c.keychain))
	if err != nil {
		return err
	}
	pipeline, err := build.New(code, builder, build.WithRegistry(c.registry), build.WithRuntimes(c.runtimes), build.WithConcurrency(c.builds), build.WithTenantConcurrency(c.tenantBuilds),
		build.WithTimeout(5*time.Minute), build.WithIndex(apiv1.RuntimePython311, indexproxy.Sanitize(c.pipIndex)), build.WithIndex(apiv1.RuntimeNodejs20, indexproxy.Sanitize(c.npmRegistry)),
		build.WithObserver(observe))
	if err != nil {
		return err
	}
	var depsCfg *controllers.DepsConfig
	if c.operatorImage != "" {
		store, err := deps.NewRegistryStore(c.registry+"/sless/deps", remote.WithAuthFromKeychain(c.keychain))
		if err != nil {
			return err
		}
		depsCfg = &controllers.DepsConfig{Store: store, Repo: c.registry + "/sless/deps", OperatorImage: c.operatorImage, Insecure: c.insecure,
			PushCredential: c.depsPush, Proxy: c.proxyURL(),
			Pins: &controllers.ConfigMapPins{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: c.operatorNS}}
	}
	recorder := mgr.GetEventRecorderFor("sless-operator")
	logs, err := podLogs(mgr.GetConfig(), code)
	if err != nil {
		return err
	}
	// Stopping pods' logs are kept for GET …/logs; the leader only (a Runnable), like the rest.
	if err := mgr.Add(&controllers.LogKeeper{Informers: mgr.GetCache(), Code: code, Follow: logs.FollowPod}); err != nil {
		return err
	}
	gate := ""
	if c.policyGate {
		gate = c.operatorImage
	}
	if err := (&controllers.FunctionReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Pipeline: pipeline, Code: code, PolicyGate: gate,
		PublicURL: c.publicURL, Deps: depsCfg, APIReader: mgr.GetAPIReader(), Recorder: recorder, Events: pipeline.Events(), MaxConcurrentReconciles: c.workers,
		OperatorNamespace: c.operatorNS, Autoscale: c.autoscale}).SetupWithManager(mgr); err != nil {
		return err
	}
	collector := &controllers.Collector{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Pipeline: pipeline, Namespace: c.operatorNS}
	if depsCfg != nil {
		collector.Pins = depsCfg.Pins
	}
	if err := mgr.Add(collector); err != nil {
		return err
	}
	if err := (&controllers.FunctionJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: recorder, PolicyGate: gate}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&controllers.TriggerReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), PublicURL: c.publicURL, Recorder: recorder, PolicyGate: gate}).SetupWithManager(mgr)
}

// servingKinds are what /fn/ reads from the manager's cache: their informers start with the
// manager, so that readiness means they are synced (informers are otherwise made on first read).
var servingKinds = []client.Object{&discoveryv1.EndpointSlice{}, &slessv1.Function{}, &slessv1.Trigger{}}

// cachesSynced is readiness (for the Service in front): the manager's caches are synced, with an
// informer for each of kinds. It latches: informers added later (lazily, on a first read of a
// kind) must not flap readiness and take the API out of its Service.
func cachesSynced(mgr ctrl.Manager, kinds ...client.Object) func(context.Context) error {
	var synced atomic.Bool
	return func(ctx context.Context) error {
		if synced.Load() {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		for _, k := range kinds {
			if _, err := mgr.GetCache().GetInformer(wctx, k, cache.BlockUntilSynced(false)); err != nil {
				return fmt.Errorf("caches not started yet: %w", err)
			}
		}
		if !mgr.GetCache().WaitForCacheSync(wctx) {
			return errors.New("caches not synced yet")
		}
		synced.Store(true)
		return nil
	}
}

// quantityFlag is a flag holding a Kubernetes quantity ("16", "500m", "8Gi").
type quantityFlag struct{ q *resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil {
		return ""
	}
	return f.q.String()
}

func (f quantityFlag) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err == nil {
		*f.q = q
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
