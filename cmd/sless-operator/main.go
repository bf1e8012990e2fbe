package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
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

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sless-operator", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "REST API and /fn/ address")
	publicURL := fs.String("public-url", "http://127.0.0.1:8080", "base URL users reach the API at")
	registry := fs.String("registry", "", "registry host[:port] function images are pushed to (required)")
	insecure := fs.Bool("insecure-registry", false, "plain HTTP to the registry")
	codeDir := fs.String("code-dir", "", "code store directory (or the S3 flags)")
	s3Endpoint := fs.String("s3-endpoint", "", "S3 endpoint of the code store")
	s3Bucket := fs.String("s3-bucket", "", "S3 bucket of the code store")
	s3Region := fs.String("s3-region", "us-east-1", "S3 region")
	jwks := fs.String("jwks-url", "", "verify tokens with this JWKS URL")
	pubKey := fs.String("jwt-public-key", "", "verify tokens with this PEM public key file")
	secretFile := fs.String("hs256-secret-file", "", "verify HS256 tokens with the secret in this file (development)")
	operatorNS := fs.String("operator-namespace", "sless-system", "namespace the operator (and the /fn/ proxy) runs in")
	pullSecret := fs.String("pull-secret-file", "", ".dockerconfigjson copied into every tenant namespace as sless-registry")
	builds := fs.Int("max-builds", 2, "concurrent in-process builds")
	operatorImage := fs.String("operator-image", "", "this operator's image (by digest): deps Jobs run its `sless deps push`; empty refuses functions with dependencies")
	pipIndex := fs.String("pip-index-url", "", "package index for pip installs in deps Jobs (default: the runtime's)")
	npmRegistry := fs.String("npm-registry", "", "npm registry for npm installs in deps Jobs (default: the runtime's)")
	depsEgress := fs.String("deps-egress", "", "comma-separated CIDRs deps Job pods may reach besides DNS (package index, registry), for tenant NetworkPolicies")
	rts := runtimeFlags{}
	fs.Var(rts, "runtime", "NAME=IMAGE@sha256:… (repeatable): runtime images by digest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" || len(rts) == 0 {
		return errors.New("--registry and at least one --runtime are required")
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	var code codestore.Store
	var err error
	switch {
	case *codeDir != "":
		code, err = codestore.NewDir(*codeDir)
	case *s3Bucket != "":
		var s3 *codestore.S3
		if s3, err = codestore.NewS3(ctx, codestore.S3Config{Bucket: *s3Bucket, Endpoint: *s3Endpoint, Region: *s3Region}); err == nil {
			// A fresh install has no bucket yet; uploads would fail with NoSuchBucket.
			err = s3.EnsureBucket(ctx)
		}
		code = s3
	default:
		err = errors.New("give --code-dir or --s3-bucket")
	}
	if err != nil {
		return err
	}
	var aopt auth.Option
	switch {
	case *jwks != "":
		aopt = auth.WithJWKS(*jwks)
	case *pubKey != "":
		b, err := os.ReadFile(*pubKey)
		if err != nil {
			return err
		}
		aopt = auth.WithPublicKeyPEM(b)
	case *secretFile != "":
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			return err
		}
		aopt = auth.WithHS256Secret([]byte(strings.TrimSpace(string(b))))
	default:
		return errors.New("give --jwks-url, --jwt-public-key or --hs256-secret-file")
	}
	verifier, err := auth.New(aopt, auth.WithContext(ctx), auth.WithLogger(logger))
	if err != nil {
		return err
	}
	var dockerConfig []byte = []byte(`{"auths":{}}`)
	if *pullSecret != "" {
		if dockerConfig, err = os.ReadFile(*pullSecret); err != nil {
			return err
		}
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := slessv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// /fn/ reads EndpointSlices from the cache: only those of sless's Services (slices carry their
	// Service's labels), not every slice in the cluster.
	ours := labels.SelectorFromSet(labels.Set{runspec.LabelManagedBy: runspec.ManagedBy})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Label: ours}}}})
	if err != nil {
		return err
	}
	builder, err := oci.NewBuilder(oci.WithInsecure(*insecure))
	if err != nil {
		return err
	}
	var srv *api.Server // builds are counted on its /metrics
	pipeline, err := build.New(code, builder, build.WithRegistry(*registry), build.WithRuntimes(rts), build.WithConcurrency(*builds),
		build.WithTimeout(5*time.Minute), build.WithIndex(apiv1.RuntimePython311, *pipIndex), build.WithIndex(apiv1.RuntimeNodejs20, *npmRegistry),
		build.WithObserver(func(result string, d time.Duration) { srv.ObserveBuild(result, d) }))
	if err != nil {
		return err
	}
	var depsCfg *controllers.DepsConfig
	if *operatorImage != "" {
		store, err := deps.NewRegistryStore(*registry+"/sless/deps", remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return err
		}
		depsCfg = &controllers.DepsConfig{Store: store, Repo: *registry + "/sless/deps", OperatorImage: *operatorImage, Insecure: *insecure}
	}
	if err := (&controllers.FunctionReconciler{Client: mgr.GetClient(), Scheme: scheme, Pipeline: pipeline, Code: code,
		PublicURL: *publicURL, Deps: depsCfg, APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorderFor("sless-operator")}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.FunctionJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Recorder: mgr.GetEventRecorderFor("sless-operator")}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.TriggerReconciler{Client: mgr.GetClient(), Scheme: scheme, PublicURL: *publicURL, Recorder: mgr.GetEventRecorderFor("sless-operator")}).SetupWithManager(mgr); err != nil {
		return err
	}
	// The API reads and writes through a direct client: the manager's cache is eventually
	// consistent (a create followed by a get could miss) and not ready before it syncs.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	backend := kubestore.New(direct, code, resources.TenantConfig{OperatorNamespace: *operatorNS, DockerConfigJSON: dockerConfig,
		DepsEgress: splitList(*depsEgress)},
		// /fn/ goes to ready pods read from the manager's cache of EndpointSlices, not the Service's IP.
		&kubestore.EndpointResolver{Reader: mgr.GetClient()})
	// /fn/ reads functions and triggers from the manager's cache (the controllers watch both), not
	// with two API round trips per request; the REST routes keep the direct client for
	// read-after-write.
	backend.Serving = kubestore.ServingView(mgr.GetClient())
	// Ready (for the Service in front of it) once the manager's caches are synced: /fn/ reads
	// EndpointSlices from them.
	// Once: informers added later (lazily, on a first read of a kind) must not flap readiness and
	// take the API out of its Service.
	var cacheSynced atomic.Bool
	synced := func(ctx context.Context) error {
		if cacheSynced.Load() {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(wctx) {
			return errors.New("caches not synced yet")
		}
		cacheSynced.Store(true)
		return nil
	}
	srv, err = api.New(backend, api.WithVerifier(verifier), api.WithLogger(logger), api.WithPublicURL(*publicURL), api.WithReadiness(synced))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- mgr.Start(ctx) }()
	go func() { errc <- api.Serve(ctx, api.NewHTTPServer("", srv.Handler(), logger), ln, 10*time.Second) }()
	fmt.Fprintf(os.Stderr, "sless-operator: API and /fn/ on %s\n", ln.Addr())
	err = <-errc
	if ctx.Err() != nil {
		<-errc // the other half is stopping too
		return nil
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
