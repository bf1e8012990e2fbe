package config_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/internal/kubetest"
)

// The generated role reads no Secret anywhere: the operator creates and replaces tenants' pull
// secrets (an update sends the whole object and returns nothing of the old one) and reads its own
// from mounted files.
func TestRoleReadsNoSecrets(t *testing.T) {
	b, err := os.ReadFile("rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := sigsyaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res != "secrets" && res != "*" {
				continue
			}
			for _, v := range r.Verbs {
				if v != "create" && v != "update" {
					t.Errorf("the operator's role grants %s on %s", v, res)
				}
			}
		}
	}
}

// Pod logs (GET …/logs, and the logs the controller keeps of stopping pods) are read, nothing
// more: no exec, attach, port-forward or proxy into tenant pods, no writes to logs.
func TestRoleReadsPodLogsOnly(t *testing.T) {
	b, err := os.ReadFile("rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := sigsyaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	logs := false
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			switch {
			case res == "pods/log":
				logs = true
				if len(r.Verbs) != 1 || r.Verbs[0] != "get" {
					t.Errorf("the operator's role grants %v on pods/log, want get only", r.Verbs)
				}
			case strings.HasPrefix(res, "pods/") || res == "*":
				t.Errorf("the operator's role grants %v on %s", r.Verbs, res)
			}
		}
	}
	if !logs {
		t.Error("the operator's role cannot read pod logs")
	}
}

// As the operator's service account, on a real kube-apiserver with the install's role, binding and
// admission policy: it cannot read a Secret, and it can delete a namespace only if it manages it.
func TestOperatorIdentityIsBounded(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	admin := env.Client
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); err != nil {
		t.Fatal(err)
	}
	op := operatorClient(t, env)
	managed := map[string]string{"app.kubernetes.io/managed-by": "sless-operator"}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "sless-0000000000000ab1", Labels: managed}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sless-0000000000000ab2", Labels: managed}},
	} {
		if err := admin.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: "kube-victim"}, StringData: map[string]string{"p": "x"}})

	if err := op.Get(ctx, client.ObjectKey{Namespace: "kube-victim", Name: "db-password"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator read another namespace's Secret: %v", err)
	}
	if err := op.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator listed Secrets: %v", err)
	}
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-registry", Namespace: "sless-0000000000000ab1"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
	if err := op.Create(ctx, pull); err != nil {
		t.Errorf("the operator cannot create a tenant's pull secret: %v", err)
	}

	// Pod logs are readable; a shell in a tenant's pod is not.
	for _, a := range []struct {
		verb, sub string
		want      bool
	}{{"get", "log", true}, {"create", "exec", false}, {"get", "exec", false}, {"create", "attach", false}, {"create", "portforward", false}} {
		rev := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: "sless-0000000000000ab1", Verb: a.verb, Resource: "pods", Subresource: a.sub}}}
		if err := op.Create(ctx, rev); err != nil {
			t.Fatal(err)
		}
		if rev.Status.Allowed != a.want {
			t.Errorf("the operator may %s pods/%s: %v, want %v", a.verb, a.sub, rev.Status.Allowed, a.want)
		}
	}

	// The policy is enforced once the API server has loaded it: wait for the first refusal.
	var err2 error
	deadline := time.Now().Add(30 * time.Second)
	for {
		err2 = op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}})
		if err2 != nil || time.Now().After(deadline) {
			break
		}
		// Not enforced yet and the delete went through: put the namespace back and try again.
		waitGone(t, admin, "kube-victim")
		admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}})
		time.Sleep(200 * time.Millisecond)
	}
	if !apierrors.IsForbidden(err2) && !apierrors.IsInvalid(err2) || !strings.Contains(err2.Error(), "only the tenant namespaces it manages") {
		t.Fatalf("deleting a namespace it does not manage: %v", err2)
	}
	if err := op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-0000000000000ab2"}}); err != nil {
		t.Errorf("deleting a tenant namespace it manages: %v", err)
	}
	// An administrator is not bound by it.
	if err := admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}}); err != nil {
		t.Errorf("an administrator deleting the namespace: %v", err)
	}
}

// operatorClient installs the operator's role, binding and admission policies and returns a
// client with the operator's identity.
func operatorClient(t *testing.T, env *kubetest.Env) client.Client {
	t.Helper()
	op, err := client.New(operatorConfig(t, env), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// operatorConfig installs the operator's role and admission policies and returns a configuration
// that acts as its service account.
func operatorConfig(t *testing.T, env *kubetest.Env) *rest.Config {
	t.Helper()
	for _, f := range []string{"rbac/role.yaml", "rbac/service_account.yaml", "rbac/role_binding.yaml", "rbac/namespace_deletes.yaml", "rbac/tenant_updates.yaml"} {
		applyFile(t, env.Client, f)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:sless-system:sless-operator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:sless-system", "system:authenticated"}}
	return cfg
}

func waitGone(t *testing.T, c client.Client, ns string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n corev1.Namespace
		err := c.Get(context.Background(), client.ObjectKey{Name: ns}, &n)
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil && len(n.Spec.Finalizers) > 0 {
			// envtest runs no namespace controller: finish the deletion by hand.
			n.Spec.Finalizers = nil
			c.SubResource("finalize").Update(context.Background(), &n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func applyFile(t *testing.T, c client.Client, f string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(".", f))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("%s: %v", f, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(context.Background(), &u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %s %s: %v", f, u.GetKind(), u.GetName(), err)
		}
	}
}
