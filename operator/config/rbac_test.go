package config_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/internal/kubetest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// The install's two accounts.
const (
	apiAccount        = "sless-api"
	controllerAccount = "sless-controller"
)

func readRole(t *testing.T, f string) rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := sigsyaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	return role
}

// grants lists "verb resource" for every rule of role (apiGroup prefixed when not core).
func grants(role rbacv1.ClusterRole) map[string]bool {
	out := map[string]bool{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					name := res
					if g != "" {
						name = g + "/" + res
					}
					out[v+" "+name] = true
				}
			}
		}
	}
	return out
}

// Neither role reads a Secret anywhere: Secrets are created, replaced whole (an update returns
// nothing of the old one) and, by the API, deleted; each process reads its own from mounted files.
func TestRolesReadNoSecrets(t *testing.T) {
	for _, f := range []string{"rbac/api_role.yaml", "rbac/controller_role.yaml"} {
		for g := range grants(readRole(t, f)) {
			verb, res, _ := strings.Cut(g, " ")
			// The API also deletes a tenant's secret (admission holds it to sless-secret-*): still no read.
			// The controller deletes a namespace's consumer's token with the consumer.
			deletes := verb == "delete"
			if (res == "secrets" || strings.HasSuffix(res, "*")) && verb != "create" && verb != "update" && !deletes {
				t.Errorf("%s grants %s", f, g)
			}
		}
	}
}

// consumerDeployment is a namespace's rabbitmq consumer for a trigger on the tenant secret "api-key".
func consumerDeployment(ns string) *appsv1.Deployment {
	return resources.MakeConsumerDeployment(ns, []slessv1.Trigger{{Spec: slessv1.TriggerSpec{Type: "rabbitmq",
		RabbitMQ: &slessv1.RabbitMQTrigger{URLSecret: "api-key/k", Queue: "q"}}}}, resources.ConsumerConfig{Image: "op", APIURL: "http://api", PolicyGate: "op"})
}

// Pod logs are read, nothing more: no exec, attach, port-forward or proxy into tenant pods.
func TestRolesReadPodLogsOnly(t *testing.T) {
	for _, f := range []string{"rbac/api_role.yaml", "rbac/controller_role.yaml"} {
		logs := false
		for g := range grants(readRole(t, f)) {
			verb, res, _ := strings.Cut(g, " ")
			switch {
			case res == "pods/log":
				logs = true
				if verb != "get" {
					t.Errorf("%s grants %s", f, g)
				}
			case strings.HasPrefix(res, "pods/") || strings.Contains(res, "*"):
				t.Errorf("%s grants %s", f, g)
			}
		}
		if !logs {
			t.Errorf("%s cannot read pod logs", f)
		}
	}
}

// The public API's account makes no workload, patches no pod, writes no ConfigMap, reads no
// Secret, and cannot touch RBAC or admission: what it may write is the tenant-facing objects. The
// controller touches RBAC only for namespaces' rabbitmq consumers (Roles and RoleBindings in a
// namespace, ServiceAccounts).
func TestAPIRoleIsNarrow(t *testing.T) {
	g := grants(readRole(t, "rbac/api_role.yaml"))
	for _, bad := range []string{"create batch/jobs", "create batch/cronjobs", "create apps/deployments", "patch pods", "update pods",
		"create configmaps", "update configmaps", "get secrets", "list secrets", "watch secrets", "create pods", "create services",
		"create networking.k8s.io/networkpolicies", "update limitranges"} {
		if g[bad] {
			t.Errorf("the API's role grants %s", bad)
		}
	}
	for _, need := range []string{"create sless.dev/functions", "create namespaces", "delete namespaces", "get pods/log", "create secrets", "update secrets"} {
		if !g[need] {
			t.Errorf("the API's role lacks %s", need)
		}
	}
	for _, f := range []string{"rbac/api_role.yaml", "rbac/controller_role.yaml"} {
		for g := range grants(readRole(t, f)) {
			verb, res, _ := strings.Cut(g, " ")
			// The controller makes each namespace's rabbitmq consumer its account, Role and
			// RoleBinding (admission holds them to sless.consumer and the consumer's rules:
			// TestAccountsAreBounded); never a cluster-wide one, never escalate, bind or impersonate.
			consumer := f == "rbac/controller_role.yaml" && (res == "rbac.authorization.k8s.io/roles" || res == "rbac.authorization.k8s.io/rolebindings" ||
				res == "serviceaccounts") && (verb == "get" || verb == "create" || verb == "update" || verb == "delete")
			if (strings.Contains(g, "rbac.authorization.k8s.io") || strings.Contains(g, "admissionregistration") || strings.Contains(g, "serviceaccounts")) && !consumer {
				t.Errorf("%s grants %s", f, g)
			}
		}
	}
}

// As each of the install's accounts, on a real kube-apiserver with the install's roles, bindings
// and admission policies: what an attacker with code execution in sless-api or sless-controller
// would try first is Forbidden — a Job mounting a Secret in a namespace sless does not manage, a
// pod patch there, a ConfigMap update and a Secret create in kube-system, the install's own
// configuration — and so is everything that would reach past a tenant from inside one: a pod
// template naming another service account, mounting a tenant's Secret, a hostPath, host
// namespaces or privilege. What sless does itself still passes. The accounts are found through
// their roles, not their names: the same install bound to accounts of another name and namespace
// is held to the same.
func TestAccountsAreBounded(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	admin := env.Client
	installRBAC(t, env)
	managed := map[string]string{runspec.LabelManagedBy: runspec.ManagedBy}
	tenant := "sless-0000000000000ab1"
	mustCreate := func(o client.Object) {
		t.Helper()
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant, Labels: managed}})
	mustCreate(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}})
	if err := kubetest.PlantVictims(ctx, admin, "kube-victim"); err != nil {
		t.Fatal(err)
	}
	mustCreate(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: tenant}, StringData: map[string]string{"p": "x"}})
	// The consumer's Role exists, so that a binding to it is refused by admission, not for want of it.
	mustCreate(resources.MakeConsumerRole(tenant))
	mustCreate(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sless-operator", Namespace: "sless-system"}, Data: map[string]string{"OPERATOR_IMAGE": "ours"}})
	mustCreate(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-1", Namespace: tenant, Labels: resources.Labels("f", runspec.RoleFunction)},
		Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{Name: "function", Image: "fn"}}}})
	// The same roles bound to accounts of another name, in another namespace: a second install.
	for _, b := range []struct{ role, account string }{{apiAccount, "front"}, {controllerAccount, "back"}} {
		mustCreate(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "platform-" + b.account},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: b.role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "platform", Name: b.account}}})
	}

	jobIn := func(ns, secret string, edit func(*corev1.PodSpec)) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, kubetest.VictimJob(ns, secret, edit))
		}
	}
	// Every sless account, wherever installed.
	attacks := kubetest.EscapeAttacks("kube-victim")
	for _, a := range []struct {
		name string
		do   func(context.Context, client.Client) error
	}{
		{"the install's configuration", func(ctx context.Context, c client.Client) error {
			return c.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sless-operator", Namespace: "sless-system"}, Data: map[string]string{"OPERATOR_IMAGE": "evil"}})
		}},
		{"a Secret in its own namespace", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-jwt", Namespace: "sless-system",
				Labels: map[string]string{runspec.LabelTenantSecret: "true", runspec.LabelManagedBy: runspec.ManagedBy}}})
		}},
		{"a namespace sless does not manage", func(ctx context.Context, c client.Client) error {
			return c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}})
		}},
		{"an unlabelled namespace", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-unlabelled"}})
		}},
		// Inside a tenant: nothing that reaches past it.
		{"a Job mounting a tenant's Secret", jobIn(tenant, "db-password", nil)},
		{"a Job as another service account", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) { s.ServiceAccountName = "admin" })},
		{"a Job with a service account token", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = nil })},
		{"a Job on the host's network", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) { s.HostNetwork = true })},
		{"a Job with the host's PIDs", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) { s.HostPID = true })},
		{"a Job mounting a hostPath", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		})},
		{"a privileged Job", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) {
			yes := true
			s.Containers[0].SecurityContext.Privileged, s.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes, &yes
		})},
		{"a Job with an added capability", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		})},
		{"a Job reading a Secret through its environment", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}}}}
		})},
		{"a pod's spec changed", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-1", Namespace: tenant}},
				client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"containers":[{"name":"function","image":"evil"}]}}`)))
		}},
		{"a Job reading another Secret through a key reference", jobIn(tenant, "steal-push-abcde", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}, Key: "p"}}})
		})},
		{"a labelled tenant Secret without the tenant-secret prefix", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key", Namespace: tenant,
				Labels: map[string]string{runspec.LabelTenantSecret: "true"}}, StringData: map[string]string{"k": "v"}})
		}},
		{"a Secret deleted that is not a tenant's own", func(ctx context.Context, c client.Client) error {
			return c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: tenant}})
		}},
		// A rabbitmq consumer's account, role and pod: nothing wider than resources.MakeConsumer….
		{"a Role of the consumer's name reading Secrets", func(ctx context.Context, c client.Client) error {
			r := resources.MakeConsumerRole(tenant)
			r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
			return c.Create(ctx, r)
		}},
		{"a Role of another name", func(ctx context.Context, c client.Client) error {
			r := resources.MakeConsumerRole(tenant)
			r.Name = "reader"
			return c.Create(ctx, r)
		}},
		{"the consumer's RoleBinding to another Role", func(ctx context.Context, c client.Client) error {
			rb := resources.MakeConsumerRoleBinding(tenant)
			rb.RoleRef.Kind, rb.RoleRef.Name = "ClusterRole", "sless-controller"
			return c.Create(ctx, rb)
		}},
		{"the consumer's RoleBinding to the default account", func(ctx context.Context, c client.Client) error {
			rb := resources.MakeConsumerRoleBinding(tenant)
			rb.Subjects[0].Name = "default"
			return c.Create(ctx, rb)
		}},
		{"a ServiceAccount of another name", func(ctx context.Context, c client.Client) error {
			sa := resources.MakeConsumerServiceAccount(tenant)
			sa.Name = "admin"
			return c.Create(ctx, sa)
		}},
		{"a consumer Deployment mounting another Secret", func(ctx context.Context, c client.Client) error {
			d := consumerDeployment(tenant)
			d.Spec.Template.Spec.Volumes[0].Secret.SecretName = "db-password"
			return c.Create(ctx, d)
		}},
		{"a consumer Deployment projecting another Secret", func(ctx context.Context, c client.Client) error {
			d := consumerDeployment(tenant)
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Projected != nil {
					v.Projected.Sources[0].Secret.Name = "db-password"
				}
			}
			return c.Create(ctx, d)
		}},
		{"a function Deployment with the consumer's account", func(ctx context.Context, c client.Client) error {
			fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "g", UID: "u9"}, Spec: slessv1.FunctionSpec{Runtime: "python3.11", MemoryMB: 128, TimeoutSec: 5}}
			d := resources.MakeDeployment(fn, "r/f@sha256:1", 1)
			d.OwnerReferences = nil
			yes := true
			d.Spec.Template.Spec.ServiceAccountName, d.Spec.Template.Spec.AutomountServiceAccountToken = resources.ConsumerName, &yes
			return c.Create(ctx, d)
		}},
		{"a tenant Secret overwritten with an unlabelled one", func(ctx context.Context, c client.Client) error {
			return c.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: tenant}, StringData: map[string]string{"p": "evil"}})
		}},
	} {
		attacks = append(attacks, kubetest.Attack{Name: a.name, Do: a.do})
	}
	accounts := []struct{ ns, name string }{{"sless-system", apiAccount}, {"sless-system", controllerAccount}, {"platform", "front"}, {"platform", "back"}}
	clients := map[string]client.Client{}
	for _, a := range accounts {
		c, err := client.New(env.ServiceAccount(t, a.ns, a.name), client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		clients[a.ns+"/"+a.name] = c
	}
	ctl := clients["sless-system/"+controllerAccount]
	// Each policy is enforced once the API server has loaded it.
	waitEnforced(t, func() error { return jobIn("kube-victim", kubetest.VictimSecret, nil)(ctx, ctl) }, admin, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: "kube-victim"}})
	waitEnforced(t, func() error { return jobIn(tenant, "db-password", nil)(ctx, ctl) }, admin, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: tenant}})

	for _, a := range accounts {
		c := clients[a.ns+"/"+a.name]
		for _, at := range attacks {
			if err := at.Do(ctx, c); !kubetest.Refused(err) {
				t.Errorf("%s/%s: %s: %v, want Forbidden", a.ns, a.name, at.Name, err)
			}
		}
	}

	// What each does itself still passes.
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: resources.PullSecret, Namespace: tenant, Labels: managed},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
	tenantSecret := resources.MakeTenantSecret(tenant, "api-key", map[string]string{"k": "v"})
	for _, a := range []struct {
		who  string
		name string
		do   func(ctx context.Context, c client.Client) error
	}{
		{"sless-system/" + apiAccount, "a tenant namespace", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-0000000000000ab2", Labels: managed}})
		}},
		{"sless-system/" + apiAccount, "a tenant's Secret", func(ctx context.Context, c client.Client) error { return c.Create(ctx, tenantSecret.DeepCopy()) }},
		{"sless-system/" + apiAccount, "a tenant's Secret replaced", func(ctx context.Context, c client.Client) error { return c.Update(ctx, tenantSecret.DeepCopy()) }},
		{"sless-system/" + apiAccount, "a tenant's Secret deleted", func(ctx context.Context, c client.Client) error {
			if err := c.Delete(ctx, tenantSecret.DeepCopy()); err != nil {
				return err
			}
			return c.Create(ctx, tenantSecret.DeepCopy()) // the function's templates below use it
		}},
		{"sless-system/" + apiAccount, "a tenant namespace deleted", func(ctx context.Context, c client.Client) error {
			return c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-0000000000000ab2"}})
		}},
		{"sless-system/" + controllerAccount, "a tenant's pull secret", func(ctx context.Context, c client.Client) error { return c.Create(ctx, pull.DeepCopy()) }},
		{"sless-system/" + controllerAccount, "a tenant's pull secret replaced", func(ctx context.Context, c client.Client) error { return c.Update(ctx, pull.DeepCopy()) }},
		{"sless-system/" + controllerAccount, "a deps Job and its push credential", func(ctx context.Context, c client.Client) error {
			j, cm := resources.MakeDepsJob(resources.DepsJob{Namespace: tenant, Name: "f-deps-1", Function: "f", RuntimeImage: "rt", Argv: []string{"pip"},
				OperatorImage: "op", PushTo: "r/sless/deps/k:latest", DepsDir: "/app/deps", PushSecret: "f-deps-1-push-abcde"})
			resources.PolicyGate(&j.Spec.Template.Spec, "op")
			for _, o := range []client.Object{cm, j} {
				if err := c.Create(ctx, o); err != nil {
					return err
				}
			}
			return c.Create(ctx, resources.DepsPushSecret(j, "f-deps-1-push-abcde", []byte(`{"auths":{}}`)))
		}},
		{"sless-system/" + controllerAccount, "a function's Deployment, job and CronJob", func(ctx context.Context, c client.Client) error {
			// With secrets: their key references and volumes are the tenant's own Secrets.
			fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "f", UID: "u1"}, Spec: slessv1.FunctionSpec{Runtime: "python3.11", MemoryMB: 128, TimeoutSec: 5,
				SecretEnv:   []slessv1.SecretEnvVar{{Name: "K", Secret: "api-key", Key: "k"}},
				SecretFiles: []slessv1.SecretFiles{{Path: "/var/run/secrets/api", Secret: "api-key"}}}}
			fj := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "run", UID: "u2"}}
			tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "every", UID: "u3"}, Spec: slessv1.TriggerSpec{Schedule: "* * * * *"}}
			d := resources.MakeDeployment(fn, "r/f@sha256:1", 1)
			j := resources.MakeJob(fj, fn, "r/f@sha256:1")
			cj := resources.MakeCronJob(tr, fn, "r/f@sha256:1")
			for _, spec := range []*corev1.PodSpec{&d.Spec.Template.Spec, &j.Spec.Template.Spec, &cj.Spec.JobTemplate.Spec.Template.Spec} {
				resources.PolicyGate(spec, "op")
			}
			for _, o := range []client.Object{d, j, cj} {
				o.SetOwnerReferences(nil) // the owners are not in this cluster
				if err := c.Create(ctx, o); err != nil {
					return err
				}
			}
			return nil
		}},
		// The control for the Job attacks above: the same Job, none of their changes, passes.
		{"sless-system/" + controllerAccount, "a Job mounting the Secret made for it", jobIn(tenant, "steal-push-abcde", nil)},
		{"sless-system/" + controllerAccount, "a function pod annotated", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-1", Namespace: tenant}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-1"}}}`)))
		}},
		{"sless-system/" + controllerAccount, "a namespace's rabbitmq consumer", func(ctx context.Context, c client.Client) error {
			var role rbacv1.Role
			if err := c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: resources.ConsumerName}, &role); err != nil {
				return err
			}
			role.Rules = resources.ConsumerRules()
			if err := c.Update(ctx, &role); err != nil {
				return err
			}
			for _, o := range []client.Object{resources.MakeConsumerServiceAccount(tenant), resources.MakeConsumerRoleBinding(tenant),
				resources.MakeConsumerNetworkPolicy(tenant, resources.ConsumerConfig{OperatorNamespace: "sless-system", APIPort: 8080}),
				resources.MakeConsumerSecret(tenant, "token"), consumerDeployment(tenant)} {
				if err := c.Create(ctx, o); err != nil {
					return fmt.Errorf("%T: %w", o, err)
				}
			}
			return c.Update(ctx, resources.MakeConsumerSecret(tenant, "rotated"))
		}},
		{"sless-system/" + controllerAccount, "its dependency pins", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sless-deps-pins", Namespace: "sless-system"}})
		}},
	} {
		if err := a.do(ctx, clients[a.who]); err != nil {
			t.Errorf("%s: %s: %v", a.who, a.name, err)
		}
	}

	// The consumer's own account reads its namespace's Triggers and writes their status: no
	// Secret, no spec, no other namespace.
	mustCreate(&slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: tenant}, Spec: slessv1.TriggerSpec{Type: "rabbitmq", FunctionRef: "f",
		RabbitMQ: &slessv1.RabbitMQTrigger{URLSecret: "api-key/k", Queue: "q"}}})
	consumer, err := client.New(env.ServiceAccount(t, tenant, resources.ConsumerName), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var trs slessv1.TriggerList
	if err := consumer.List(ctx, &trs, client.InNamespace(tenant)); err != nil || len(trs.Items) != 1 {
		t.Errorf("the consumer lists its Triggers: %v %v", trs.Items, err)
	}
	if err := consumer.Status().Patch(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: tenant}},
		client.RawPatch(types.MergePatchType, []byte(`{"status":{"connected":true,"deliveredTotal":3}}`))); err != nil {
		t.Errorf("the consumer writes a Trigger's status: %v", err)
	}
	for _, a := range []struct {
		name string
		do   func() error
	}{
		{"reads a Secret", func() error {
			return consumer.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "db-password"}, &corev1.Secret{})
		}},
		{"lists Triggers of another namespace", func() error { return consumer.List(ctx, &slessv1.TriggerList{}, client.InNamespace("kube-victim")) }},
		{"changes a Trigger's spec", func() error {
			return consumer.Patch(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: tenant}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"enabled":false}}`)))
		}},
		{"reads a Function", func() error {
			return consumer.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "f"}, &slessv1.Function{})
		}},
		{"creates a pod", func() error { return consumer.Create(ctx, kubetest.VictimJob(tenant, "db-password", nil)) }},
	} {
		if err := a.do(); !kubetest.Refused(err) {
			t.Errorf("the consumer's account %s: %v, want Forbidden", a.name, err)
		}
	}

	// Pod logs are readable; a shell in a tenant's pod is not.
	for _, who := range []string{"sless-system/" + apiAccount, "sless-system/" + controllerAccount} {
		for _, a := range []struct {
			verb, sub string
			want      bool
		}{{"get", "log", true}, {"create", "exec", false}, {"get", "exec", false}, {"create", "attach", false}, {"create", "portforward", false}} {
			rev := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tenant, Verb: a.verb, Resource: "pods", Subresource: a.sub}}}
			if err := clients[who].Create(ctx, rev); err != nil {
				t.Fatal(err)
			}
			if rev.Status.Allowed != a.want {
				t.Errorf("%s may %s pods/%s: %v, want %v", who, a.verb, a.sub, rev.Status.Allowed, a.want)
			}
		}
		if err := clients[who].Get(ctx, client.ObjectKey{Namespace: tenant, Name: "db-password"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s read a Secret: %v", who, err)
		}
	}
	// An administrator is not bound by any of it.
	if err := admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-victim"}}); err != nil {
		t.Errorf("an administrator deleting a namespace: %v", err)
	}
}

// waitEnforced waits until the API server has loaded the admission policies: try is refused (what
// it made before that, obj, is deleted again).
func waitEnforced(t *testing.T, try func() error, admin client.Client, obj client.Object) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := try()
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return
		}
		if err != nil && !apierrors.IsAlreadyExists(err) || time.Now().After(deadline) {
			t.Fatalf("the admission policies are not enforced: %v", err)
		}
		// In the background: a Job's default (orphan) deletion waits on a finalizer that only the
		// garbage collector, which envtest does not run, removes, and the name stays taken.
		admin.Delete(context.Background(), obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		for range 100 {
			if err := admin.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// installRBAC applies the install's accounts, roles, bindings and admission policies.
func installRBAC(t *testing.T, env *kubetest.Env) { env.InstallRBAC(t, "rbac") }

// accountConfig installs the RBAC and returns a configuration that acts as the install's account.
func accountConfig(t *testing.T, env *kubetest.Env, account string) *rest.Config {
	t.Helper()
	installRBAC(t, env)
	return env.ServiceAccount(t, "sless-system", account)
}

func accountClient(t *testing.T, env *kubetest.Env, account string) client.Client {
	t.Helper()
	c, err := client.New(accountConfig(t, env, account), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
