package k8s_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/internal/kubetest"
)

// Least privilege on the real cluster, with the install as `kubectl apply -k` made it: the API and
// the controller run as their own accounts, the API's pods hold no registry key, and as each
// account the first moves of an attacker with code execution in that process — a Job mounting a
// Secret in a namespace sless does not manage, a patch of a pod there, a ConfigMap update and a
// Secret create in kube-system — are all Forbidden. (That everything sless needs still works as
// these accounts is the rest of this suite.)
func TestAccountsAreBoundedOnTheCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	accounts := map[string]string{"sless-api": "sless-api", "sless-controller": "sless-controller"}
	for deploy, account := range accounts {
		var d appsv1.Deployment
		if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: deploy}, &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.ServiceAccountName; got != account {
			t.Errorf("%s runs as %q, want %q", deploy, got, account)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if deploy == "sless-api" && v.Secret != nil && v.Secret.SecretName == "sless-registry-auth" {
				t.Errorf("sless-api mounts the registry's keys (volume %s)", v.Name)
			}
		}
	}

	victim := "sless-e2e-victim-" + strings.ToLower(runID)
	if err := kubetest.PlantVictims(ctx, cluster.Kube, victim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Kube.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victim}})
		cluster.Kube.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubetest.VictimConfigMap, Namespace: "kube-system"}})
	})
	for _, account := range accounts {
		c, err := cluster.ServiceAccount("sless-system", account)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range kubetest.EscapeAttacks(victim) {
			if err := a.Do(ctx, c); !kubetest.Refused(err) {
				t.Errorf("as %s: %s: %v, want Forbidden", account, a.Name, err)
			}
		}
	}
}
