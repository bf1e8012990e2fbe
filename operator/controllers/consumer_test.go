package controllers_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/kubetest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// The ConsumerReconciler on a real kube-apiserver: a namespace's consumer Deployment (and its
// account, Role, binding, NetworkPolicy and token Secret) appears with the first enabled rabbitmq
// trigger, mounts exactly the secrets the enabled ones name, follows the set as triggers come,
// are disabled and go, and is deleted with the last; a disabled trigger, an http trigger and
// another namespace's trigger are not consumed.
func TestConsumerFollowsTriggers(t *testing.T) {
	env := kubetest.Start(t)
	c := env.Client
	ctx := context.Background()
	ns, other := "sless-c0ffee0000000001", "sless-c0ffee0000000002"
	for _, n := range []string{ns, other} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	key := []byte("the install's event key")
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: &skipNameValidation}})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.ConsumerReconciler{Config: controllers.ConsumerConfig{Key: key, ConsumerConfig: resources.ConsumerConfig{
		Image: "registry.test/sless/operator@sha256:" + strings.Repeat("ab", 32), OperatorNamespace: "sless-system", APIURL: "http://sless-api.sless-system.svc", APIPort: 8080,
		PolicyGate: "registry.test/sless/operator@sha256:" + strings.Repeat("ab", 32)}}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { mgr.Start(mctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	no := false
	trigger := func(ns, name string, typ apiv1.TriggerType, secret string, enabled *bool) *slessv1.Trigger {
		tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: slessv1.TriggerSpec{Type: typ, FunctionRef: "f", Enabled: enabled}}
		if typ == apiv1.TriggerRabbitMQ {
			tr.Spec.RabbitMQ = &slessv1.RabbitMQTrigger{URLSecret: secret + "/url", Queue: name, DeadLetter: name + ".dlq"}
		}
		if err := c.Create(ctx, tr); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	deployment := func(ns string) *appsv1.Deployment {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &d); err != nil {
			return nil
		}
		return &d
	}
	mounts := func(want ...string) func() bool {
		return func() bool {
			d := deployment(ns)
			return d != nil && slices.Equal(resources.ConsumerSecrets(d), want)
		}
	}

	trigger(ns, "web", apiv1.TriggerHTTP, "", nil)
	trigger(ns, "off", apiv1.TriggerRabbitMQ, "offmq", &no)
	trigger(other, "theirs", apiv1.TriggerRabbitMQ, "theirs", &no)
	orders := trigger(ns, "orders", apiv1.TriggerRabbitMQ, "mq", nil)
	eventually(t, "the consumer for orders, mounting mq only (off is disabled)", mounts("mq"))
	if deployment(other) != nil {
		t.Error("a namespace whose only rabbitmq trigger is disabled got a consumer")
	}

	d := deployment(ns)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	sc, psc := ctr.SecurityContext, pod.SecurityContext
	switch {
	case *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType:
		t.Errorf("replicas %d, strategy %s: want one pod, replaced", *d.Spec.Replicas, d.Spec.Strategy.Type)
	case pod.ServiceAccountName != resources.ConsumerName || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken:
		t.Errorf("service account %q, token %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod security context %+v", psc)
	case sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container security context %+v", sc)
	case ctr.Image != r.Config.Image || !slices.Contains(ctr.Args, "--role=consumer") || !slices.Contains(ctr.Args, "--namespace="+ns):
		t.Errorf("container %s %v", ctr.Image, ctr.Args)
	case len(pod.InitContainers) != 1 || !slices.Contains(pod.InitContainers[0].Command, "--denied=$(SLESS_HOST_IP):"+resources.KubeletPort):
		t.Errorf("init containers %+v: want the policy gate probing the node's kubelet", pod.InitContainers)
	case d.Spec.Template.Labels[runspec.LabelRole] != string(runspec.RoleConsumer):
		t.Errorf("pod labels %v: the namespace's egress policy must select it", d.Spec.Template.Labels)
	}
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret == nil || s.Secret.Optional == nil || !*s.Secret.Optional {
					t.Errorf("projected source %+v: want optional secrets only", s)
				}
			}
		}
	}
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &secret); err != nil ||
		string(secret.Data[resources.ConsumerTokenKey]) != apiv1.EventToken(key, ns) {
		t.Errorf("token secret: %v %v", secret.Data, err)
	}
	var role rbacv1.Role
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &role); err != nil {
		t.Fatal(err)
	}
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "delete") ||
			slices.Contains(rule.Resources, "triggers") && slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
			t.Errorf("the consumer's role allows %v on %v", rule.Verbs, rule.Resources)
		}
	}
	var np networkingv1.NetworkPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &np); err != nil || len(np.Spec.Egress) < 2 {
		t.Errorf("network policy %+v %v: want the API's pods and the Kubernetes API", np.Spec.Egress, err)
	}

	// The token Secret deleted by hand: written again at the next reconcile (here: another trigger
	// on another secret, which the Deployment follows; one on the same secret changes nothing).
	if err := c.Delete(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	trigger(ns, "refunds", apiv1.TriggerRabbitMQ, "mq2", nil)
	eventually(t, "both secrets mounted", mounts("mq", "mq2"))
	eventually(t, "the token Secret written again", func() bool {
		var s corev1.Secret
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &s) == nil &&
			string(s.Data[resources.ConsumerTokenKey]) == apiv1.EventToken(key, ns)
	})
	before := deployment(ns).Spec.Template.Annotations
	trigger(ns, "audit", apiv1.TriggerRabbitMQ, "mq", nil)
	// Disabling orders keeps mq (audit names it) ...
	orders.Spec.Enabled = &no
	if err := c.Update(ctx, orders); err != nil {
		t.Fatal(err)
	}
	var audit slessv1.Trigger
	c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "audit"}, &audit)
	if got := deployment(ns).Spec.Template.Annotations; !maps.Equal(got, before) {
		t.Errorf("the pod template changed for a trigger on a secret already mounted: %v → %v", before, got)
	}
	// ... deleting audit drops it.
	if err := c.Delete(ctx, &audit); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mq dropped with its last enabled trigger", mounts("mq2"))
	var refunds slessv1.Trigger
	c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "refunds"}, &refunds)
	if err := c.Delete(ctx, &refunds); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every consumer object deleted with the last enabled trigger", func() bool {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}, &networkingv1.NetworkPolicy{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, o); err == nil {
				return false
			}
		}
		return true
	})
}
