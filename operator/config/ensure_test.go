package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

func pullConfig(auth string, functions int64) resources.TenantConfig {
	return resources.TenantConfig{OperatorNamespace: "sless-system", Quota: resources.TenantQuota{Functions: functions},
		DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{"r":{"auth":"` + auth + `"}}}`) }}
}

// As the install's accounts (sless-api, sless-controller), with their roles and the admission
// policies: the API's Ensure creates a tenant namespace and answers once the controller's TenantReconciler (in a
// manager, with the operator's cache) has provisioned it; a restarted controller brings it up to
// date (new quota, rotated pull secret) without the right to read a Secret, list a quota or watch
// a network policy, and an update of an object sless does not manage is refused by the API server,
// which the reconciler takes as "leave it alone".
func TestOperatorEnsuresTenantsWithItsRole(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	admin := env.Client
	api := accountClient(t, env, apiAccount)
	ctl := accountClient(t, env, controllerAccount)
	ns := "sless-0000000000000ab5"
	// The controller: the TenantReconciler in a manager acting as the operator's service account,
	// caching only tenant namespaces as the operator's manager does; restarted for each
	// configuration, as the operator is when its flags change.
	opConfig := accountConfig(t, env, controllerAccount)
	stop := func() {}
	defer func() { stop() }()
	controller := func(cfg resources.TenantConfig) {
		t.Helper()
		stop()
		tenants := labels.SelectorFromSet(labels.Set{runspec.LabelManagedBy: runspec.ManagedBy})
		skip := true
		mgr, err := ctrl.NewManager(opConfig, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Cache:      cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Namespace{}: {Label: tenants}}},
			Controller: config.Controller{SkipNameValidation: &skip}})
		if err != nil {
			t.Fatal(err)
		}
		if err := (&controllers.TenantReconciler{Tenant: cfg}).SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { mgr.Start(mctx); close(done) }()
		stop = func() { cancel(); <-done }
	}
	// ensure is the API's: it creates the namespace and waits for the controller.
	ensure := func(cfg resources.TenantConfig) error {
		t.Helper()
		b, err := kubestore.New(api, kubestore.WithTenant(cfg))
		if err != nil {
			return err
		}
		return b.Namespaces.Ensure(ctx, ns)
	}
	// provisioned waits until the running controller has brought the tenant to cfg.
	provisioned := func(cfg resources.TenantConfig) {
		t.Helper()
		var obj corev1.Namespace
		admin.Get(ctx, client.ObjectKey{Name: ns}, &obj)
		before := obj.Annotations[resources.AnnotationProvisioned]
		controller(cfg)
		deadline := time.Now().Add(30 * time.Second)
		for {
			admin.Get(ctx, client.ObjectKey{Name: ns}, &obj)
			if a := obj.Annotations[resources.AnnotationProvisioned]; a != "" && a != before {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the controller did not provision the tenant again (annotation %q)", before)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pullSecret := func() string {
		t.Helper()
		var s corev1.Secret
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PullSecret}, &s); err != nil {
			t.Fatal(err)
		}
		return string(s.Data[corev1.DockerConfigJsonKey])
	}
	controller(pullConfig("one", 0))
	if err := ensure(pullConfig("one", 0)); err != nil {
		t.Fatalf("the operator creating a tenant: %v", err)
	}
	for _, c := range []client.Client{api, ctl} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PullSecret}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("sless read the pull secret: %v", err)
		}
	}

	// The admission policy is enforced once the API server has loaded it: wait until it refuses
	// the operator's update of a Secret sless does not manage (an administrator's, in the tenant).
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, StringData: map[string]string{"k": "admin"}}
	if err := admin.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = ctl.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, StringData: map[string]string{"k": "operator"}})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "only the tenant objects it manages") {
		t.Fatalf("the operator updating a Secret it does not manage: %v", err)
	}

	provisioned(pullConfig("two", 7))
	if got := pullSecret(); got != `{"auths":{"r":{"auth":"two"}}}` {
		t.Errorf("pull secret not rotated: %s", got)
	}
	var q corev1.ResourceQuota
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); err != nil || q.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 7 {
		t.Errorf("quota not updated: %v %v", q.Spec.Hard, err)
	}

	// An administrator replaces the pull secret with one of their own: a rotation leaves it be.
	// In one update, not a delete and a create: the controller, reconciling the namespace after
	// its own annotation, may create the missing secret in between (CI saw "already exists").
	var own corev1.Secret
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PullSecret}, &own); err != nil {
		t.Fatal(err)
	}
	own.Labels = map[string]string{"owner": "admin"}
	own.Data = map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"r":{"auth":"admin"}}}`)}
	if err := admin.Update(ctx, &own); err != nil {
		t.Fatal(err)
	}
	provisioned(pullConfig("three", 7))
	if err := ensure(pullConfig("three", 7)); err != nil {
		t.Fatalf("ensure with an administrator's pull secret in place: %v", err)
	}
	if got := pullSecret(); got != `{"auths":{"r":{"auth":"admin"}}}` {
		t.Errorf("the administrator's pull secret was overwritten: %s", got)
	}
}
