package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/pgstore"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/cmd/internal/options"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/invoke"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

// apiServer makes the REST API and /fn/ (and the internal loads and metrics listeners); the
// returned func serves until ctx ends, then drains: /readyz fails, new connections are refused,
// and the requests in flight (held cold starts included) finish within --drain-timeout.
func (c *config) apiServer(ctx context.Context, mgr ctrl.Manager, code codestore.Store, tenant resources.TenantConfig, scaler *controllers.Scaler,
	builds *build.Metrics, logger *slog.Logger) (func(context.Context) error, error) {
	verifier, err := c.verifier(ctx, logger)
	if err != nil {
		return nil, err
	}
	// The API reads and writes through a direct client: the manager's cache is eventually
	// consistent (a create followed by a get could miss) and not ready before it syncs. /fn/ reads
	// through the cache.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	opts := []kubestore.Option{kubestore.WithCodeStore(code), kubestore.WithTenant(tenant), kubestore.WithCache(mgr.GetClient()),
		kubestore.WithPodLogs(mgr.GetConfig()), kubestore.WithRuntimeImages(c.runtimes)}
	// A request with no instance waits while the Scaler starts one: poked directly in one process;
	// apart, through /pokes on the loads listener, which the Scaler long-polls on every replica.
	var pokes *invoke.Pokes
	if scaler != nil {
		opts = append(opts, kubestore.WithScaler(scaler))
	} else if c.autoscaleOn {
		pokes = invoke.NewPokes()
		opts = append(opts, kubestore.WithScaler(pokes))
	}
	var history *pgstore.Invocations
	if c.databaseURL != "" {
		// Open does not wait for the database: /fn/ serves while it is away (records are buffered,
		// then counted as dropped), and the history answers 503 not_ready meanwhile.
		if history, err = pgstore.Open(ctx, c.databaseURL, pgstore.WithRetention(c.retention), pgstore.WithLogger(logger)); err != nil {
			return nil, err
		}
		opts = append(opts, kubestore.WithInvocations(history))
	} else {
		logger.Warn("no --database-url: the invocation history is this replica's own, in memory")
	}
	backend, err := kubestore.New(direct, opts...)
	if err != nil {
		return nil, err
	}
	if history != nil {
		// Asynchronous invocations queue in the same database; without one the API refuses
		// async.enabled (an in-memory queue would lose what it answered 202 to).
		backend.Async = history.AsyncQueue()
	}
	// Namespaces' rabbitmq consumers send their events with their namespace's token.
	srv, err := api.New(backend, c.api.ServerOptions(api.WithVerifier(verifier), api.WithLogger(logger), api.WithReadiness(cachesSynced(mgr, servingKinds...)),
		api.WithEventKey(c.eventKey))...)
	if err != nil {
		return nil, err
	}
	srv.Metrics().MustRegister(builds) // the controllers' builds, when they run in this process
	if history != nil {
		srv.Metrics().MustRegister(history)
	}
	mln, err := c.metrics.Listen(options.OperatorMetricsListen)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.api.Address(options.OperatorListen))
	if err != nil {
		mln.Close()
		return nil, err
	}
	var lln net.Listener
	if c.loadsListen != "" {
		if lln, err = net.Listen("tcp", c.loadsListen); err != nil {
			ln.Close()
			mln.Close()
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "sless-operator: API and /fn/ on %s, metrics on %s\n", ln.Addr(), mln.Addr())
	return func(ctx context.Context) error {
		// The loads and metrics listeners outlive the public one: the autoscaler must see the held
		// requests this replica still finishes, and Prometheus how the drain goes.
		lctx, stopLoads := context.WithCancel(context.WithoutCancel(ctx))
		merr := make(chan error, 1)
		go func() {
			merr <- api.Serve(lctx, api.NewHTTPServer("", api.MetricsHandler(srv.Metrics(), c.metricsToken), logger), mln, time.Second)
		}()
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
		// Every replica dispatches asynchronous invocations (the queue gives each to one) until
		// the signal; the attempts in flight finish within the drain.
		dctx, stopDispatch := context.WithCancel(ctx)
		dispatched := make(chan struct{})
		go func() { defer close(dispatched); srv.RunAsync(dctx) }()
		err := api.Serve(sctx, hs, ln, c.drainTimeout)
		stopDispatch()
		<-dispatched
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
		if merr := <-merr; err == nil && ctx.Err() == nil && merr != nil {
			err = fmt.Errorf("serving /metrics: %w", merr)
		}
		return err
	}, nil
}

// verifier checks tokens with the keys --jwks-url or --jwt-public-key name, else with the
// --hs256-secret-file secret.
func (c *config) verifier(ctx context.Context, logger *slog.Logger) (*auth.Verifier, error) {
	key, err := c.auth.Key()
	if err != nil {
		return nil, err
	}
	if key == nil {
		if c.secretFile == "" {
			return nil, errors.New("give --jwks-url, --jwt-public-key or --hs256-secret-file")
		}
		b, err := os.ReadFile(c.secretFile)
		if err != nil {
			return nil, err
		}
		key = auth.WithHS256Secret([]byte(strings.TrimSpace(string(b))))
	}
	return c.auth.Verifier(ctx, logger, key)
}
