package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

func pullConfig(auth string, functions int64) resources.TenantConfig {
	return resources.TenantConfig{OperatorNamespace: "sless-system", Quota: resources.TenantQuota{Functions: functions},
		DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{"r":{"auth":"` + auth + `"}}}`) }}
}

// As the operator's service account, with the install's role and admission policies: the API's
// Ensure creates a tenant namespace, the controller's TenantReconciler provisions it and later
// brings it up to date (new quota, rotated pull secret) without the right to read a Secret, and
// an update of an object sless does not manage is refused by the API server, which the reconciler
// takes as "leave it alone"; then Ensure answers.
func TestOperatorEnsuresTenantsWithItsRole(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	admin := env.Client
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); err != nil {
		t.Fatal(err)
	}
	op := operatorClient(t, env)
	ns := "sless-0000000000000ab5"
	ensure := func(cfg resources.TenantConfig) error {
		t.Helper()
		b, err := kubestore.New(op, kubestore.WithTenant(cfg), kubestore.WithProvisionTimeout(200*time.Millisecond))
		if err != nil {
			return err
		}
		// The API creates the namespace (or finds it) and waits for the controller; with none
		// running here, the reconciler is called as the controller would call it.
		if err := b.Namespaces.Ensure(ctx, ns); err != nil && !errors.As(err, new(*objects.NotReadyError)) {
			return err
		}
		r := &controllers.TenantReconciler{Client: op, Tenant: cfg}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: ns}}); err != nil {
			return err
		}
		return b.Namespaces.Ensure(ctx, ns)
	}
	pullSecret := func() string {
		t.Helper()
		var s corev1.Secret
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PullSecret}, &s); err != nil {
			t.Fatal(err)
		}
		return string(s.Data[corev1.DockerConfigJsonKey])
	}
	if err := ensure(pullConfig("one", 0)); err != nil {
		t.Fatalf("the operator creating a tenant: %v", err)
	}
	if err := op.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.PullSecret}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator read the pull secret: %v", err)
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
		err = op.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, StringData: map[string]string{"k": "operator"}})
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "only the tenant objects it manages") {
		t.Fatalf("the operator updating a Secret it does not manage: %v", err)
	}

	if err := ensure(pullConfig("two", 7)); err != nil {
		t.Fatalf("the operator updating a tenant: %v", err)
	}
	if got := pullSecret(); got != `{"auths":{"r":{"auth":"two"}}}` {
		t.Errorf("pull secret not rotated: %s", got)
	}
	var q corev1.ResourceQuota
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); err != nil || q.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 7 {
		t.Errorf("quota not updated: %v %v", q.Spec.Hard, err)
	}

	// An administrator replaces the pull secret with one of their own: a rotation leaves it be.
	if err := admin.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: resources.PullSecret, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: resources.PullSecret, Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"r":{"auth":"admin"}}}`)}}
	if err := admin.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := ensure(pullConfig("three", 7)); err != nil {
		t.Fatalf("ensure with an administrator's pull secret in place: %v", err)
	}
	if got := pullSecret(); got != `{"auths":{"r":{"auth":"admin"}}}` {
		t.Errorf("the administrator's pull secret was overwritten: %s", got)
	}
}
