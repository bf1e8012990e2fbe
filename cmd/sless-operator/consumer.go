package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/consumer"
)

// runConsumer runs one tenant namespace's rabbitmq triggers until ctx ends (operator/consumer):
// it watches that namespace's Triggers only, as its own service account.
func runConsumer(ctx context.Context, c *config) error {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("role", roleConsumer, "namespace", c.consumer.namespace)
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	scheme := runtime.NewScheme()
	if err := slessv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{c.consumer.namespace: {}},
			ByObject: map[client.Object]cache.ByObject{&slessv1.Trigger{}: {}}}})
	if err != nil {
		return err
	}
	// No metrics listener: the pod serves nothing (its counts are in the triggers' status).
	r := &consumer.Runner{Client: mgr.GetClient(), Namespace: c.consumer.namespace, APIURL: c.consumer.apiURL,
		TokenFile: c.consumer.tokenFile, SecretsDir: c.consumer.secretsDir, Log: logger}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	logger.Info("consuming", "api", c.consumer.apiURL)
	return mgr.Start(ctx)
}
