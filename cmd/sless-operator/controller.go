package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/cmd/internal/options"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/indexproxy"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

// setupControllerRole starts the index proxy and adds to mgr the controllers (controllers.Setup)
// and the pass that brings existing tenants to the current configuration. It returns the Scaler
// (nil without --autoscale).
func (c *config) setupControllerRole(ctx context.Context, mgr ctrl.Manager, code codestore.Store, creds *registryCreds,
	tenant resources.TenantConfig, builds *build.Metrics, logger *slog.Logger) (*controllers.Scaler, error) {
	if c.indexProxy != "" {
		// Installers run tenant code and get no credential: the proxy adds the indexes' upstream.
		// Every controller replica serves it, leader or not (a Service in front).
		ix := c.indexes
		p, err := indexproxy.New([]string{ix.PipIndexURL, ix.NPMRegistry}, append(indexproxy.PublicHosts(ix.PipIndexURL, ix.NPMRegistry), ix.Hosts...), logger)
		if err != nil {
			return nil, err
		}
		ps, err := indexproxy.Listen(c.indexProxy, p)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { ps.Close() })
	}
	pipeline, err := c.pipeline(code, creds, builds.Observe)
	if err != nil {
		return nil, err
	}
	logs, err := kubestore.NewLogs(mgr.GetConfig(), code)
	if err != nil {
		return nil, err
	}
	cfg := controllers.Config{Pipeline: pipeline, Code: code, PublicURL: c.api.PublicURL, OperatorNamespace: c.operatorNS,
		MaxConcurrentReconciles: c.workers, FollowPod: logs.FollowPod}
	if c.policyGate {
		cfg.PolicyGate = c.operatorImage
	}
	if c.operatorImage != "" {
		store, err := deps.NewRegistryStore(c.registry+"/sless/deps", remote.WithAuthFromKeychain(creds.keychain))
		if err != nil {
			return nil, err
		}
		cfg.Deps = &controllers.DepsConfig{Store: store, Repo: c.registry + "/sless/deps", OperatorImage: c.operatorImage, Insecure: c.insecure,
			PushCredential: creds.depsPush, Proxy: c.proxyURL()}
	}
	// Each namespace's rabbitmq triggers run in a consumer pod of the operator image, with a
	// token for that namespace's functions.
	if c.operatorImage != "" && len(c.eventKey) > 0 {
		cfg.Consumer = &controllers.ConsumerConfig{Key: c.eventKey, ConsumerConfig: resources.ConsumerConfig{Image: c.operatorImage, OperatorNamespace: c.operatorNS,
			APIURL: cmp.Or(c.consumerAPIURL, "http://sless-api."+c.operatorNS+".svc"), APIPort: c.consumerAPIPort}}
	} else {
		logger.Warn("rabbitmq triggers do not run: they need --operator-image and --event-key-file")
	}
	if c.autoscaleOn {
		cfg.Autoscale = &controllers.AutoscaleConfig{Decider: c.autoscale.DeciderOptions(), LoadsService: c.loadsService,
			Instances: &kubestore.EndpointResolver{Reader: mgr.GetClient()}}
	}
	// Tenant namespaces are provisioned by the TenantReconciler: at start every one is brought to
	// the current flags (new quota values, policies, a rotated pull secret).
	cfg.Tenant = tenant
	return controllers.Setup(mgr, cfg)
}

// pipeline is the build pipeline the reconcilers share.
func (c *config) pipeline(code codestore.Store, creds *registryCreds, observe func(build.Observation)) (*build.Pipeline, error) {
	builder, err := oci.NewBuilder(oci.WithInsecure(c.insecure), oci.WithKeychain(creds.keychain))
	if err != nil {
		return nil, err
	}
	return build.New(code, builder, build.WithRegistry(c.registry), build.WithRuntimes(c.runtimes), build.WithConcurrency(c.builds),
		build.WithTenantConcurrency(c.tenantBuilds), build.WithTimeout(5*time.Minute),
		build.WithIndex("python", indexproxy.Sanitize(c.indexes.PipIndexURL)), build.WithIndex("node", indexproxy.Sanitize(c.indexes.NPMRegistry)),
		build.WithObserver(observe))
}

// controllerServer serves the controller's /healthz and /readyz (the caches synced) on --listen,
// and its /metrics (the builds', which name tenants' namespaces) on --metrics-listen, as the API
// role does.
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
	mln, err := c.metrics.Listen(options.OperatorMetricsListen)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.api.Address(options.OperatorListen))
	if err != nil {
		mln.Close()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "sless-operator: controller health on %s, metrics on %s\n", ln.Addr(), mln.Addr())
	return func(ctx context.Context) error {
		// Either server stopping stops the other.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		merr := make(chan error, 1)
		go func() {
			defer cancel()
			merr <- api.Serve(ctx, api.NewHTTPServer("", api.MetricsHandler(reg, c.metricsToken), logger), mln, time.Second)
		}()
		err := api.Serve(ctx, api.NewHTTPServer("", mux, logger), ln, time.Second)
		cancel()
		if merr := <-merr; err == nil && merr != nil {
			err = fmt.Errorf("serving /metrics: %w", merr)
		}
		return err
	}, nil
}
