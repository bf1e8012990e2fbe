package controllers

import (
	"cmp"
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/operator/resources"
)

// EventSource is the name the controllers' Kubernetes Events carry as their source.
const EventSource = "sless-operator"

// Config is what Setup wires into a manager.
type Config struct {
	// Pipeline builds and pushes function images; it also records their lifecycle events.
	// Required.
	Pipeline *build.Pipeline
	// Code is the store uploads land in, and where stopped pods' logs are kept. Required.
	Code codestore.Store
	// PublicURL is the API's base URL, for the functions' and triggers' status.url.
	PublicURL string
	// OperatorNamespace is the operator's: it holds the record of images a finalizer gave up on,
	// the dependency pins and the loads Service. Required.
	OperatorNamespace string
	// Deps makes dependency layers with Jobs on a cache miss; nil fails the functions that declare
	// dependencies. Nil Pins are a ConfigMapPins in OperatorNamespace; the Collector deletes the
	// layers no function's build records, with their pins.
	Deps *DepsConfig
	// PolicyGate is the image whose `sless policy-wait` starts every pod of tenant code
	// (resources.PolicyGate); "" for none.
	PolicyGate string
	// MaxConcurrentReconciles is how many Functions are reconciled at once (default 4).
	MaxConcurrentReconciles int
	// FollowPod follows a function pod's log from its first line until the pod is done, for the
	// LogKeeper (kubestore.Logs.FollowPod). Required.
	FollowPod func(ctx context.Context, ns, fn, pod string, emit func(apiv1.LogLine) error) error
	// Tenant is what every tenant namespace gets (the TenantReconciler; its OperatorNamespace is
	// set from OperatorNamespace when empty).
	Tenant resources.TenantConfig
	// Consumer runs each namespace's rabbitmq triggers in a consumer Deployment of its own
	// (ConsumerReconciler). Nil: rabbitmq triggers report that this install runs none.
	Consumer *ConsumerConfig
	// Autoscale, when set, runs the Scaler: the replicas of running functions follow their load.
	// Nil: one instance per function (none while its http triggers are off).
	Autoscale *AutoscaleConfig
}

// AutoscaleConfig is what the Scaler reads.
type AutoscaleConfig struct {
	// Decider are the decider's options (autoscale.New).
	Decider []autoscale.Option
	// Instances lists a function's pods (a kubestore.EndpointResolver on the manager's cache).
	// Required.
	Instances activator.Source
	// LoadsService names the Service in Config.OperatorNamespace whose EndpointSlices list the /fn/
	// replicas whose load the Scaler sums (port "loads"; the manager's cache must hold its
	// slices). Required.
	LoadsService string
}

func (c *Config) validate() error {
	switch {
	case c.Pipeline == nil:
		return errors.New("controllers: Setup needs Config.Pipeline, the build pipeline (build.New)")
	case c.Code == nil:
		return errors.New("controllers: Setup needs Config.Code, the code store")
	case c.OperatorNamespace == "":
		return errors.New("controllers: Setup needs Config.OperatorNamespace")
	case c.FollowPod == nil:
		return errors.New("controllers: Setup needs Config.FollowPod for the LogKeeper (kubestore.Logs.FollowPod)")
	case c.Autoscale != nil && (c.Autoscale.Instances == nil || c.Autoscale.LoadsService == ""):
		return errors.New("controllers: Config.Autoscale needs Instances and LoadsService")
	}
	return nil
}

// Setup adds to mgr everything the controller leader runs: the Scaler (with cfg.Autoscale), the
// LogKeeper, the Function reconciler, the Collector and the FunctionJob, Trigger and Tenant
// reconcilers.
// It returns the Scaler (nil without cfg.Autoscale), which a /fn/ in the same process pokes.
func Setup(mgr ctrl.Manager, cfg Config) (*Scaler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var scaler *Scaler
	if a := cfg.Autoscale; a != nil {
		decider, err := autoscale.New(a.Decider...)
		if err != nil {
			return nil, err
		}
		// The load of every /fn/ replica, this process's included, read over HTTP: one code path
		// for one replica or many. Pokes come from the same endpoints (WatchPokes) when the API
		// runs apart.
		scaler = NewScaler(Scaler{Client: mgr.GetClient(), Instances: a.Instances, Decider: decider,
			Loads: &LoadScraper{Reader: mgr.GetClient(), Namespace: cfg.OperatorNamespace, Service: a.LoadsService}})
		if err := mgr.Add(scaler); err != nil {
			return nil, err
		}
	}
	deps := cfg.Deps
	if deps != nil && deps.Pins == nil {
		withPins := *deps
		withPins.Pins = &ConfigMapPins{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: cfg.OperatorNamespace}
		deps = &withPins
	}
	recorder := mgr.GetEventRecorderFor(EventSource)
	// Stopping pods' logs are kept for GET …/logs; the leader only (a Runnable), like the rest.
	if err := mgr.Add(&LogKeeper{Informers: mgr.GetCache(), Code: cfg.Code, Follow: cfg.FollowPod}); err != nil {
		return nil, err
	}
	if err := (&FunctionReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Pipeline: cfg.Pipeline, Code: cfg.Code, PolicyGate: cfg.PolicyGate,
		PublicURL: cfg.PublicURL, Deps: deps, APIReader: mgr.GetAPIReader(), Recorder: recorder, Events: cfg.Pipeline.Events(),
		MaxConcurrentReconciles: cfg.MaxConcurrentReconciles, OperatorNamespace: cfg.OperatorNamespace, Autoscale: cfg.Autoscale != nil}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	collector := &Collector{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Pipeline: cfg.Pipeline, Namespace: cfg.OperatorNamespace}
	if deps != nil {
		collector.Pins = deps.Pins
	}
	if err := mgr.Add(collector); err != nil {
		return nil, err
	}
	if err := (&FunctionJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: recorder,
		PolicyGate: cfg.PolicyGate}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&TriggerReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), PublicURL: cfg.PublicURL, Recorder: recorder,
		PolicyGate: cfg.PolicyGate}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	consumers := &ConsumerReconciler{}
	if cfg.Consumer != nil {
		consumers.Config = *cfg.Consumer
		consumers.Config.OperatorNamespace = cmp.Or(consumers.Config.OperatorNamespace, cfg.OperatorNamespace)
		consumers.Config.PolicyGate = cmp.Or(consumers.Config.PolicyGate, cfg.PolicyGate)
	}
	if err := consumers.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	tenant := cfg.Tenant
	tenant.OperatorNamespace = cmp.Or(tenant.OperatorNamespace, cfg.OperatorNamespace)
	if err := (&TenantReconciler{Tenant: tenant}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	return scaler, nil
}
