package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

func tenantConfig(auth string, quota resources.TenantQuota, egress ...string) resources.TenantConfig {
	return resources.TenantConfig{OperatorNamespace: "sless-system", Quota: quota, DepsEgress: egress,
		DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{"registry:5000":{"auth":"` + auth + `"}}}`) }}
}

func ensure(t *testing.T, c client.Client, ns string, cfg resources.TenantConfig) {
	t.Helper()
	if err := tenants(t, c, cfg).Ensure(context.Background(), ns); err != nil {
		t.Fatalf("ensure %s: %v", ns, err)
	}
}

// tenants is the backend's namespace store with tenant configuration cfg.
func tenants(t *testing.T, c client.Client, cfg resources.TenantConfig) objects.Namespaces {
	t.Helper()
	b, err := kubestore.New(c, kubestore.WithTenant(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return b.Namespaces
}

// writesOfEnsure runs Ensure through a client that records every write it makes (a create that
// succeeded, any update or patch): the API server itself skips a no-op update, so the resource
// versions would not show one.
func writesOfEnsure(t *testing.T, ns string, cfg resources.TenantConfig) []string {
	t.Helper()
	env := shared.Get(t)
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
	ensure(t, c, ns, cfg)
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

// Ensure creates what is missing and updates what differs from the configuration now (quota
// values, network policies, a rotated pull secret, namespace labels), writes nothing when all is
// current, and leaves objects alone that are not labelled managed-by sless.
func TestEnsureUpdatesTenantObjects(t *testing.T) {
	c := shared.Get(t).Client
	ctx := context.Background()
	ns := "sless-0000000000e05e01"
	ensure(t, c, ns, tenantConfig("old", resources.TenantQuota{}, "10.0.0.1/32:5000"))
	before := readTenant(t, c, ns)
	if before.quota.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 100 || string(before.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"old"}}}` ||
		before.deps.Spec.Egress[0].To[0].IPBlock.CIDR != "10.0.0.1/32" {
		t.Fatalf("created %+v", before)
	}
	if w := writesOfEnsure(t, ns, tenantConfig("old", resources.TenantQuota{}, "10.0.0.1/32:5000")); len(w) != 0 {
		t.Errorf("a second ensure with nothing changed wrote: %v", w)
	}

	// The operator restarts with new quota values, a rotated registry key and another registry.
	newCfg := tenantConfig("rotated", resources.TenantQuota{Functions: 7, CPU: resource.MustParse("4"), ContainerCPU: resource.MustParse("500m")}, "10.0.0.2/32:5000")
	ensure(t, c, ns, newCfg)
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
	if w := writesOfEnsure(t, ns, newCfg); len(w) != 0 {
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
	ensure(t, c, ns, newCfg)
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

// A namespace of the tenant's name that sless does not manage is a conflict, and nothing is
// created in it.
func TestEnsureRefusesANamespaceItDoesNotManage(t *testing.T) {
	c := shared.Get(t).Client
	ctx := context.Background()
	ns := "sless-0000000000e05e02"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	err := tenants(t, c, tenantConfig("x", resources.TenantQuota{})).Ensure(ctx, ns)
	if !errors.Is(err, objects.ErrConflict) {
		t.Errorf("ensure of an unmanaged namespace: %v", err)
	}
	var q corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); !apierrors.IsNotFound(err) {
		t.Errorf("a quota was created in it: %v", err)
	}
}

// EnsureTenants brings every tenant namespace up to date (a rotation reaches tenants that never
// call ensure again) and nothing else.
func TestEnsureTenants(t *testing.T) {
	c := shared.Get(t).Client
	ctx := context.Background()
	a, b, other := "sless-0000000000e05e03", "sless-0000000000e05e04", "sless-0000000000e05e05"
	ensure(t, c, a, tenantConfig("old", resources.TenantQuota{}))
	ensure(t, c, b, tenantConfig("old", resources.TenantQuota{}))
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	if err := kubestore.EnsureTenants(ctx, c, tenantConfig("new", resources.TenantQuota{Functions: 9})); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{a, b} {
		s := readTenant(t, c, ns)
		if string(s.secret.Data[corev1.DockerConfigJsonKey]) != `{"auths":{"registry:5000":{"auth":"new"}}}` || s.quota.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 9 {
			t.Errorf("%s not brought up to date: %s %v", ns, s.secret.Data, s.quota.Spec.Hard)
		}
	}
	var q corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: "sless-quota"}, &q); !apierrors.IsNotFound(err) {
		t.Errorf("EnsureTenants wrote into a namespace sless does not manage: %v", err)
	}
}
