package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/resources"
)

// start runs what cfg.role says until ctx ends: the controllers (on the leader), the API and
// /fn/, or both; the manager's informers run until the HTTP servers have drained.
func start(ctx context.Context, cfg *config) error {
	if cfg.role == roleConsumer {
		return runConsumer(ctx, cfg)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("role", cfg.role)
	// The controllers' and the Scaler's own lines go to the same log.
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	code, err := cfg.codeStore(ctx, logger)
	if err != nil {
		return err
	}
	// The registry's keys are the controller's only: the API writes no pull secret and pushes
	// nothing.
	var creds *registryCreds
	var pull func(string) []byte
	if cfg.runsControllers() {
		if creds, err = cfg.registryCredentials(); err != nil {
			return err
		}
		pull = creds.tenantPull
	}
	// Only the controllers elect a leader: every API replica serves.
	mgr, err := newManager(cfg.runsControllers() && cfg.leaderElect, cfg.operatorNS)
	if err != nil {
		return err
	}
	tenant := resources.TenantConfig{OperatorNamespace: cfg.operatorNS, DockerConfigJSON: pull,
		DepsEgress: splitList(cfg.egress), IndexProxyPort: cfg.proxyPort(), Quota: cfg.tenantQuota(), Egress: cfg.tenantEgress}
	if !tenant.Egress.Enforceable() {
		// Opening "the outside" without knowing the cluster's ranges would open the cluster too.
		logger.Warn("tenant egress: DNS and --egress-allow only, --egress-default=internet is not enforced: no --cluster-cidr names the cluster's pod, Service and node ranges")
	} else {
		logger.Info("tenant egress", "default", tenant.Egress.Install.Permitted("").Mode, "cluster", tenant.Egress.Cluster, "deny", tenant.Egress.Deny)
	}
	builds := build.NewMetrics()
	var scaler *controllers.Scaler
	if cfg.runsControllers() {
		if scaler, err = cfg.setupControllerRole(ctx, mgr, code, creds, tenant, builds, logger); err != nil {
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
		serve, err = cfg.apiServer(ctx, mgr, code, tenant, scaler, builds, logger)
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
