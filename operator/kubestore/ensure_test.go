package kubestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

func tenantConfig(auth string) resources.TenantConfig {
	return resources.TenantConfig{OperatorNamespace: "sless-system",
		DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{"registry:5000":{"auth":"` + auth + `"}}}`) }}
}

// tenants is the backend's namespace store with tenant configuration cfg.
func tenants(t *testing.T, c client.Client, cfg resources.TenantConfig, opts ...kubestore.Option) objects.Namespaces {
	t.Helper()
	b, err := kubestore.New(c, append([]kubestore.Option{kubestore.WithTenant(cfg)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b.Namespaces
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
	err := tenants(t, c, tenantConfig("x")).Ensure(ctx, ns)
	if !errors.Is(err, objects.ErrConflict) {
		t.Errorf("ensure of an unmanaged namespace: %v", err)
	}
	var q corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); !apierrors.IsNotFound(err) {
		t.Errorf("a quota was created in it: %v", err)
	}
}

// Ensure creates the namespace, labelled as sless's, and answers once the controller provisioned
// it (its annotation), not before; without a controller it answers 503 (not ready) within its
// bound, the namespace made, and a later ensure waits again.
func TestEnsureWaitsForTheController(t *testing.T) {
	c := shared.Get(t).Client
	ctx := context.Background()
	ns := unprovisioned[0]
	store := tenants(t, c, tenantConfig("x"), kubestore.WithProvisionTimeout(time.Second))
	start := time.Now()
	err := store.Ensure(ctx, ns)
	var nr *objects.NotReadyError
	if !errors.As(err, &nr) || time.Since(start) < time.Second {
		t.Fatalf("ensure with no controller: %v after %v, want not ready after 1 s", err, time.Since(start))
	}
	var obj corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil || obj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("the namespace: %+v %v", obj.Labels, err)
	}
	// The controller provisions it a moment later: ensure answers then.
	go func() {
		time.Sleep(300 * time.Millisecond)
		var obj corev1.Namespace
		c.Get(ctx, client.ObjectKey{Name: ns}, &obj)
		obj.Annotations = map[string]string{resources.AnnotationProvisioned: "test"}
		c.Update(ctx, &obj)
	}()
	start = time.Now()
	if err := store.Ensure(ctx, ns); err != nil || time.Since(start) < 250*time.Millisecond {
		t.Errorf("ensure while the controller provisions: %v after %v", err, time.Since(start))
	}
	// Provisioned: at once.
	start = time.Now()
	if err := store.Ensure(ctx, ns); err != nil || time.Since(start) > 200*time.Millisecond {
		t.Errorf("ensure of a provisioned namespace: %v after %v", err, time.Since(start))
	}
	var q corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); !apierrors.IsNotFound(err) {
		t.Errorf("the API wrote a tenant object itself: %v", err)
	}
}
