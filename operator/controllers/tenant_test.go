package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

func tenantConfig(auth string, quota resources.TenantQuota, egress ...string) resources.TenantConfig {
	return resources.TenantConfig{OperatorNamespace: "sless-system", Quota: quota, DepsEgress: egress,
		DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{"registry:5000":{"auth":"` + auth + `"}}}`) }}
}

// createTenantNamespace creates ns as the API's ensure does: labelled as sless's.
func createTenantNamespace(t *testing.T, c client.Client, ns string) {
	t.Helper()
	want, _ := resources.TenantObjects(ns, resources.TenantConfig{})
	if err := c.Create(context.Background(), want); err != nil {
		t.Fatal(err)
	}
}

// provision runs ProvisionTenant on ns as the TenantReconciler does.
func provision(t *testing.T, c client.Client, ns string, cfg resources.TenantConfig) string {
	t.Helper()
	var obj corev1.Namespace
	if err := c.Get(context.Background(), client.ObjectKey{Name: ns}, &obj); err != nil {
		t.Fatal(err)
	}
	sum, err := controllers.ProvisionTenant(context.Background(), c, &obj, cfg)
	if err != nil {
		t.Fatalf("provisioning %s: %v", ns, err)
	}
	return sum
}

// writesOfProvision runs ProvisionTenant through a client that records every write it makes (a
// create that succeeded, any update or patch): the API server itself skips a no-op update, so the
// resource versions would not show one.
func writesOfProvision(t *testing.T, env *kubetest.Env, ns string, cfg resources.TenantConfig) []string {
	t.Helper()
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var writes []string
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			if err == nil {
				writes = append(writes, fmt.Sprintf("create %T %s", obj, obj.GetName()))
			}
			return err
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes = append(writes, fmt.Sprintf("update %T %s", obj, obj.GetName()))
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes = append(writes, fmt.Sprintf("patch %T %s", obj, obj.GetName()))
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	provision(t, c, ns, cfg)
	return writes
}

// tenantState reads a tenant namespace's objects (as an administrator, who may read Secrets).
type tenantState struct {
	ns     corev1.Namespace
	quota  corev1.ResourceQuota
	limits corev1.LimitRange
	deps   networkingv1.NetworkPolicy
	def    networkingv1.NetworkPolicy
	secret corev1.Secret
}

func readTenant(t *testing.T, c client.Client, ns string) tenantState {
	t.Helper()
	ctx := context.Background()
	var s tenantState
	for _, r := range []struct {
		name string
		obj  client.Object
	}{{"", &s.ns}, {"sless-quota", &s.quota}, {"sless-limits", &s.limits}, {"sless-deps-egress", &s.deps}, {"sless-default", &s.def}, {"sless-registry", &s.secret}} {
		key := client.ObjectKey{Namespace: ns, Name: r.name}
		if r.name == "" {
			key = client.ObjectKey{Name: ns}
		}
		if err := c.Get(ctx, key, r.obj); err != nil {
			t.Fatalf("%T %s: %v", r.obj, r.name, err)
		}
	}
	return s
}

// ProvisionTenant creates what is missing and updates what differs from the configuration now
// (quota values, network policies, a rotated pull secret, namespace labels), writes nothing when
// all is current, and leaves objects alone that are not labelled managed-by sless.
func TestProvisionTenantUpdatesTenantObjects(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Client
	ctx := context.Background()
	ns := "sless-0000000000e05e01"
	createTenantNamespace(t, c, ns)
	provision(t, c, ns, tenantConfig("old", resources.TenantQuota{}, "10.0.0.1/32:5000"))
	before := readTenant(t, c, ns)
	if before.quota.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 100 || string(before.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"old"}}}` ||
		before.deps.Spec.Egress[0].To[0].IPBlock.CIDR != "10.0.0.1/32" {
		t.Fatalf("created %+v", before)
	}
	if w := writesOfProvision(t, env, ns, tenantConfig("old", resources.TenantQuota{}, "10.0.0.1/32:5000")); len(w) != 0 {
		t.Errorf("a second ensure with nothing changed wrote: %v", w)
	}

	// The operator restarts with new quota values, a rotated registry key and another registry.
	newCfg := tenantConfig("rotated", resources.TenantQuota{Functions: 7, CPU: resource.MustParse("4"), ContainerCPU: resource.MustParse("500m")}, "10.0.0.2/32:5000")
	provision(t, c, ns, newCfg)
	after := readTenant(t, c, ns)
	if after.quota.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 7 || after.quota.Spec.Hard.Name("limits.cpu", "").String() != "4" {
		t.Errorf("quota not updated: %v", after.quota.Spec.Hard)
	}
	if after.limits.Spec.Limits[0].Default.Cpu().String() != "500m" {
		t.Errorf("limit range not updated: %+v", after.limits.Spec.Limits[0])
	}
	if after.deps.Spec.Egress[0].To[0].IPBlock.CIDR != "10.0.0.2/32" {
		t.Errorf("deps egress not updated: %+v", after.deps.Spec.Egress)
	}
	if got := string(after.secret.Data[corev1.DockerConfigJsonKey]); got != `{"auths":{"registry:5000":{"auth":"rotated"}}}` {
		t.Errorf("pull secret not rotated: %s", got)
	}
	if after.def.ResourceVersion != before.def.ResourceVersion {
		t.Error("the default policy, unchanged, was written")
	}
	if w := writesOfProvision(t, env, ns, newCfg); len(w) != 0 {
		t.Errorf("ensure after the update wrote again: %v", w)
	}

	// Hand edits of sless's objects are undone; the namespace keeps labels of others.
	after.quota.Spec.Hard[corev1.ResourcePods] = resource.MustParse("1000")
	if err := c.Update(ctx, &after.quota); err != nil {
		t.Fatal(err)
	}
	delete(after.ns.Labels, "pod-security.kubernetes.io/enforce")
	after.ns.Labels["team"] = "a"
	if err := c.Update(ctx, &after.ns); err != nil {
		t.Fatal(err)
	}
	// The pull secret deleted by hand comes back.
	if err := c.Delete(ctx, &after.secret); err != nil {
		t.Fatal(err)
	}
	// An administrator's own limit range under sless's name (no managed-by label) is kept.
	after.limits.Labels = nil
	after.limits.Spec.Limits[0].Max[corev1.ResourceCPU] = resource.MustParse("3")
	after.limits.Spec.Limits[0].Default[corev1.ResourceCPU] = resource.MustParse("3")
	if err := c.Update(ctx, &after.limits); err != nil {
		t.Fatal(err)
	}
	provision(t, c, ns, newCfg)
	fixed := readTenant(t, c, ns)
	if fixed.quota.Spec.Hard.Pods().Value() != 50 {
		t.Errorf("hand-edited quota not restored: %v", fixed.quota.Spec.Hard)
	}
	if fixed.ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || fixed.ns.Labels["team"] != "a" {
		t.Errorf("namespace labels %v", fixed.ns.Labels)
	}
	if string(fixed.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"rotated"}}}` {
		t.Errorf("deleted pull secret not recreated: %s", fixed.secret.Data)
	}
	if fixed.limits.Spec.Limits[0].Max.Cpu().String() != "3" || fixed.limits.ResourceVersion != after.limits.ResourceVersion {
		t.Errorf("an unlabelled limit range was changed: %+v", fixed.limits.Spec)
	}
}

// The TenantReconciler provisions every namespace labelled as sless's as it appears and, when the
// controller starts, brings every existing tenant to its configuration (a rotation reaches tenants
// that never call ensure again), marking each provisioned (what the API's ensure waits for); it
// leaves other namespaces alone.
func TestTenantReconciler(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Client
	ctx := context.Background()
	start := func(cfg resources.TenantConfig) func() {
		t.Helper()
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: &skipNameValidation}})
		if err != nil {
			t.Fatal(err)
		}
		if err := (&controllers.TenantReconciler{Tenant: cfg}).SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { mgr.Start(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
	provisioned := func(ns string) string {
		var obj corev1.Namespace
		c.Get(ctx, client.ObjectKey{Name: ns}, &obj)
		return obj.Annotations[resources.AnnotationProvisioned]
	}
	a, b, other := "sless-0000000000e05e03", "sless-0000000000e05e04", "sless-0000000000e05e05"
	stop := start(tenantConfig("old", resources.TenantQuota{}))
	createTenantNamespace(t, c, a)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new tenant provisioned", func() bool { return provisioned(a) != "" })
	if s := readTenant(t, c, a); string(s.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"old"}}}` {
		t.Errorf("%s: pull secret %s", a, s.secret.Data)
	}
	createTenantNamespace(t, c, b)
	eventually(t, "the second tenant provisioned", func() bool { return provisioned(b) != "" })
	oldA, oldB := provisioned(a), provisioned(b)
	stop()

	// The controller restarts with a rotated registry key and a new quota: both tenants get them,
	// and say so.
	stop = start(tenantConfig("new", resources.TenantQuota{Functions: 9}))
	defer stop()
	eventually(t, "both tenants brought up to date", func() bool { return provisioned(a) != oldA && provisioned(b) != oldB })
	for _, ns := range []string{a, b} {
		s := readTenant(t, c, ns)
		if string(s.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"new"}}}` || s.quota.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 9 {
			t.Errorf("%s not brought up to date: %s %v", ns, s.secret.Data, s.quota.Spec.Hard)
		}
	}
	// A namespace sless does not manage gets nothing (given a moment in which a reconcile of it
	// would have written).
	time.Sleep(500 * time.Millisecond)
	var q corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: "sless-quota"}, &q); !apierrors.IsNotFound(err) {
		t.Errorf("the reconciler wrote into a namespace sless does not manage: %v", err)
	}
	if provisioned(other) != "" {
		t.Error("a namespace sless does not manage marked provisioned")
	}
	if l := (corev1.NamespaceList{}); c.List(ctx, &l, client.MatchingLabels{runspec.LabelManagedBy: runspec.ManagedBy}) != nil || len(l.Items) != 2 {
		t.Errorf("tenant namespaces: %d", len(l.Items))
	}
}
