package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/runspec"
)

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
		// The TenantReconciler watches namespaces: only tenant namespaces (labelled as sless's).
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&discoveryv1.EndpointSlice{}: {Label: ours}, &corev1.Pod{}: {Label: fnPods},
			&corev1.Namespace{}: {Label: ours}}},
		// A pod that stops hands the Lease on at once instead of letting it expire (15 s).
		LeaderElection: leaderElect, LeaderElectionID: leaseName, LeaderElectionNamespace: namespace, LeaderElectionReleaseOnCancel: true,
		// A leader that dies without releasing (a node lost) is replaced within 8 s + the standby's
		// retry (1 s, jittered up to 2.2 s) after its last renewal: ≈ 10–12.5 s, under 15 s.
		LeaseDuration: ptr.To(8 * time.Second), RenewDeadline: ptr.To(5 * time.Second), RetryPeriod: ptr.To(1 * time.Second)})
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
