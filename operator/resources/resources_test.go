package resources_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/internal/kubetest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

const image = "registry.sless.svc:5000/sless-0123456789abcdef/hello@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func fn() *slessv1.Function {
	return &slessv1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "sless-0123456789abcdef", UID: types.UID("uid-1")},
		Spec: slessv1.FunctionSpec{Runtime: "python3.11", Entrypoint: "handler.handle", MemoryMB: 256, TimeoutSec: 60,
			Env: []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}},
	}
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func assertRestricted(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 65532 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "sless-registry" {
		t.Errorf("pull secrets %v", pod.ImagePullSecrets)
	}
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		csc := c.SecurityContext
		if csc == nil || *csc.AllowPrivilegeEscalation || !*csc.ReadOnlyRootFilesystem || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s security context %+v", c.Name, csc)
		}
	}
}

// Kubernetes expands $(NAME) in env values: a user's value and a job's event arrive as written.
func TestEnvValuesAreNotExpanded(t *testing.T) {
	f := fn()
	f.Spec.Env = []corev1.EnvVar{{Name: "TEMPLATE", Value: "$(PORT)-$$-$HOME"}}
	c := resources.MakeDeployment(f, image, 1).Spec.Template.Spec.Containers[0]
	if got := envOf(c)["TEMPLATE"]; got != "$$(PORT)-$$$$-$$HOME" {
		t.Errorf("TEMPLATE = %q, want every $ doubled", got)
	}
	if got := envOf(c)["PORT"]; got != "8080" {
		t.Errorf("a platform value changed: PORT = %q", got)
	}
}

func TestMakeDeployment(t *testing.T) {
	d := resources.MakeDeployment(fn(), image, 1)
	if *d.Spec.Replicas != 1 || d.Name != "hello" || d.Namespace != "sless-0123456789abcdef" {
		t.Errorf("meta %s/%s replicas %d", d.Namespace, d.Name, *d.Spec.Replicas)
	}
	if off := resources.MakeDeployment(fn(), image, 0); *off.Spec.Replicas != 0 {
		t.Error("replicas 0 not kept")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("image %s", c.Image)
	}
	want := map[string]string{"GREETING": "hi", "PORT": "8080", "TIMEOUT_SEC": "60", "GRACE_SEC": "62"}
	if diff := cmp.Diff(want, envOf(c)); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if c.Resources.Limits.Memory().String() != "256Mi" || c.Resources.Requests.Memory().String() != "256Mi" {
		t.Errorf("resources %+v", c.Resources)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/health" || c.ReadinessProbe.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("readiness %+v", c.ReadinessProbe)
	}
	if ls := d.Spec.Template.Spec.Containers[0].Lifecycle; ls == nil || ls.PreStop == nil || ls.PreStop.Sleep == nil || ls.PreStop.Sleep.Seconds != 3 {
		t.Errorf("no preStop sleep: %+v", ls)
	}
	if *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 68 {
		t.Errorf("grace %d", *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	if d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Error("a rollout may take the old pod down before the new one is ready")
	}
	if diff := cmp.Diff(d.Spec.Selector.MatchLabels, map[string]string{"sless.dev/function": "hello", "sless.dev/role": "function"}); diff != "" {
		t.Errorf("selector: %s", diff)
	}
	if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].Kind != "Function" || !*d.OwnerReferences[0].Controller {
		t.Errorf("owner %+v", d.OwnerReferences)
	}
	assertRestricted(t, d.Spec.Template.Spec)
	s := resources.MakeService(fn())
	if s.Spec.Ports[0].Port != 80 || s.Spec.Ports[0].TargetPort.IntValue() != 8080 || s.Spec.Selector["sless.dev/function"] != "hello" {
		t.Errorf("service %+v", s.Spec)
	}
}

func TestMakeJobs(t *testing.T) {
	fj := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "sum", Namespace: "ns"},
		Spec: slessv1.FunctionJobSpec{FunctionRef: "hello", RunID: 3, EventJSON: `{"input":[100,200,300]}`}}
	j := resources.MakeJob(fj, fn(), image)
	c := j.Spec.Template.Spec.Containers[0]
	if j.Name != "sum-run-3" || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("job %s backoff %d", j.Name, *j.Spec.BackoffLimit)
	}
	env := envOf(c)
	if env["JOB_MODE"] != "1" || env["EVENT_JSON"] != `{"input":[100,200,300]}` || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError || env["TERMINATION_LOG"] != "/dev/termination-log" {
		t.Errorf("job container %+v", c)
	}
	assertRestricted(t, j.Spec.Template.Spec)

	no := false
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "daily", Namespace: "ns"}, Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "hello", Schedule: "0 9 * * *", Enabled: &no}}
	cj := resources.MakeCronJob(tr, fn(), image)
	if cj.Spec.Schedule != "0 9 * * *" || cj.Spec.ConcurrencyPolicy != "Forbid" || *cj.Spec.StartingDeadlineSeconds != 60 || !*cj.Spec.Suspend {
		t.Errorf("cronjob %+v", cj.Spec)
	}
	if env := envOf(cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]); env["EVENT_JSON"] != `{"source":"cron","trigger":"daily"}` {
		t.Errorf("cron event %q", env["EVENT_JSON"])
	}

	dj, cm := resources.MakeDepsJob(resources.DepsJob{Namespace: "ns", Name: "deps-abc", Function: "hello", RuntimeImage: image,
		Argv: []string{"python3", "-m", "pip", "install"}, Env: []string{"HOME=/work"}, Manifests: map[string]string{"requirements.txt": "six\n"},
		OperatorImage: "registry/sless-operator@sha256:1", PushTo: "registry/sless/deps:abc", DepsDir: "/app/deps"})
	if dj.Spec.Template.Labels["sless.dev/role"] != "deps" || cm.Data["requirements.txt"] != "six\n" {
		t.Errorf("deps job labels %v cm %v", dj.Spec.Template.Labels, cm.Data)
	}
	if diff := cmp.Diff([]string{"sless", "deps", "push", "--dir", "/out", "--to", "registry/sless/deps:abc", "--prefix", "/app/deps"}, dj.Spec.Template.Spec.Containers[0].Command); diff != "" {
		t.Errorf("push command: %s", diff)
	}
	assertRestricted(t, dj.Spec.Template.Spec)
	for _, c := range append(dj.Spec.Template.Spec.InitContainers, dj.Spec.Template.Spec.Containers...) {
		if !hasEnv(c.Env, "TMPDIR", "/work") || c.Resources.Limits.Memory().String() != "1Gi" {
			t.Errorf("%s: temp files must go to /work (not the 64 MiB /tmp) and memory be 1Gi: %v %v", c.Name, c.Env, c.Resources.Limits)
		}
	}

	// Without CIDRs, deps pods get DNS only: an egress rule without peers would allow everything.
	_, objs := resources.TenantObjects("sless-00000000000000cc", resources.TenantConfig{OperatorNamespace: "sless-system"})
	for _, o := range objs {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok && np.Name == "sless-deps-egress" && len(np.Spec.Egress) != 0 {
			t.Errorf("deps egress without CIDRs: %+v", np.Spec.Egress)
		}
	}
}

func hasEnv(env []corev1.EnvVar, k, v string) bool {
	for _, e := range env {
		if e.Name == k && e.Value == v {
			return true
		}
	}
	return false
}

// The objects are valid for a real kube-apiserver (server-side validation, not only Go types).
func TestObjectsAcceptedByAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-0123456789abcdef",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	f := fn()
	f.UID = ""
	if err := env.Client.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	fj := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "sum", Namespace: ns.Name}, Spec: slessv1.FunctionJobSpec{FunctionRef: "hello", RunID: 1}}
	if err := env.Client.Create(ctx, fj); err != nil {
		t.Fatal(err)
	}
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "daily", Namespace: ns.Name}, Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "hello", Schedule: "0 9 * * *"}}
	if err := env.Client.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	dj, cm := resources.MakeDepsJob(resources.DepsJob{Namespace: ns.Name, Name: "deps-abc", Function: "hello", RuntimeImage: image,
		Argv: []string{"true"}, Manifests: map[string]string{"requirements.txt": "six\n"}, OperatorImage: image, PushTo: "r/sless/deps/abc:latest", DepsDir: "/app/deps", PushSecret: "deps-abc-push-x1y2z"})
	for _, obj := range []client.Object{resources.MakeDeployment(f, image, 1), resources.MakeService(f), resources.MakeJob(fj, f, image),
		resources.MakeCronJob(tr, f, image), cm, dj} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("%T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func TestDepsPodsReachTheIndexProxy(t *testing.T) {
	_, objs := resources.TenantObjects("sless-00000000000000cd", resources.TenantConfig{OperatorNamespace: "sless-system",
		DepsEgress: []string{"10.88.0.1/32:5000"}, IndexProxyPort: 3128})
	var deps *networkingv1.NetworkPolicy
	for _, o := range objs {
		if np, ok := o.(*networkingv1.NetworkPolicy); ok && np.Name == "sless-deps-egress" {
			deps = np
		}
	}
	if deps == nil || len(deps.Spec.Egress) != 2 {
		t.Fatalf("deps policy %+v", deps)
	}
	if reg := deps.Spec.Egress[0]; reg.To[0].IPBlock.CIDR != "10.88.0.1/32" || len(reg.Ports) != 1 || reg.Ports[0].Port.IntValue() != 5000 {
		t.Errorf("the registry rule %+v", reg)
	}
	proxy := deps.Spec.Egress[1]
	if len(proxy.To) != 1 || proxy.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "sless-system" ||
		len(proxy.Ports) != 1 || proxy.Ports[0].Port.IntValue() != 3128 {
		t.Errorf("the proxy rule %+v", proxy)
	}
}

func TestTenantObjectsAccepted(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns, objs := resources.TenantObjects("sless-00000000000000bb", resources.TenantConfig{OperatorNamespace: "sless-system",
		DockerConfigJSON: func(string) []byte {
			return []byte(`{"auths":{"registry.sless-system.svc:5000":{"auth":"dXNlcjpwYXNz"}}}`)
		}, DepsEgress: []string{"10.96.0.0/12"}})
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("labels %v", ns.Labels)
	}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		obj := o.(client.Object)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("%T %s: %v", obj, obj.GetName(), err)
		}
	}
}

func TestPolicyGateComesFirst(t *testing.T) {
	j, _ := resources.MakeDepsJob(resources.DepsJob{Namespace: "ns", Name: "d", Function: "f", RuntimeImage: "rt@sha256:1",
		Argv: []string{"true"}, OperatorImage: "op@sha256:2", PushTo: "r/sless/deps/k:latest", DepsDir: "/app/deps", PushSecret: "s"})
	spec := &j.Spec.Template.Spec
	resources.PolicyGate(spec, "op@sha256:2")
	gate := spec.InitContainers[0]
	if len(spec.InitContainers) != 2 || gate.Name != "wait-network-policy" || gate.Image != "op@sha256:2" ||
		strings.Join(gate.Command, " ") != "sless policy-wait" || spec.InitContainers[1].Name != "install" {
		t.Fatalf("init containers %+v", spec.InitContainers)
	}
	if sc := gate.SecurityContext; sc == nil || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("the gate is not restricted: %+v", sc)
	}
	before := len(spec.InitContainers)
	resources.PolicyGate(spec, "")
	if len(spec.InitContainers) != before {
		t.Error("an empty image added a gate")
	}
}
