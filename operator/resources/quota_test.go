package resources_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/internal/kubetest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

func tenantQuotaAndLimits(t *testing.T, c resources.TenantConfig) (*corev1.ResourceQuota, *corev1.LimitRange) {
	t.Helper()
	var q *corev1.ResourceQuota
	var l *corev1.LimitRange
	_, objs := resources.TenantObjects("sless-00000000000000dd", c)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ResourceQuota:
			q = o
		case *corev1.LimitRange:
			if q != nil {
				t.Error("the quota comes before the limit range: pods admitted in between would miss the new defaults")
			}
			l = o
		}
	}
	if q == nil || l == nil {
		t.Fatalf("quota %v limits %v", q, l)
	}
	return q, l
}

// The quota bounds CPU, memory, ephemeral storage, pods and Function objects, with the documented
// defaults or the configured values.
func TestTenantQuota(t *testing.T) {
	q, l := tenantQuotaAndLimits(t, resources.TenantConfig{OperatorNamespace: "sless-system"})
	want := map[corev1.ResourceName]string{"limits.cpu": "16", "requests.cpu": "16", "limits.memory": "8Gi",
		"requests.ephemeral-storage": "20Gi", "limits.ephemeral-storage": "20Gi", "pods": "50", "count/functions.sless.dev": "100"}
	if len(q.Spec.Hard) != len(want) {
		t.Errorf("hard %v, want %v", q.Spec.Hard, want)
	}
	for k, v := range want {
		if got, ok := q.Spec.Hard[k]; !ok || got.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("%s = %v, want %s", k, q.Spec.Hard[k], v)
		}
	}
	item := l.Spec.Limits[0]
	if item.Type != corev1.LimitTypeContainer || item.Default.Cpu().String() != "1" || item.Default.StorageEphemeral().String() != "256Mi" ||
		item.DefaultRequest.StorageEphemeral().String() != "64Mi" || item.Max.Cpu().String() != "1" || item.Max.StorageEphemeral().String() != "5Gi" {
		t.Errorf("limit range %+v", item)
	}
	// The API server fills in a Default from Max and a DefaultRequest from Default: the object
	// must already hold them, or every Ensure would find it changed.
	for k, max := range item.Max {
		if d, ok := item.Default[k]; !ok || d.Cmp(max) > 0 {
			t.Errorf("%s: default %v, max %v", k, item.Default[k], max)
		}
	}
	for k, d := range item.Default {
		if r, ok := item.DefaultRequest[k]; !ok || r.Cmp(d) > 0 {
			t.Errorf("%s: default request %v, default %v", k, item.DefaultRequest[k], d)
		}
	}

	q, l = tenantQuotaAndLimits(t, resources.TenantConfig{Quota: resources.TenantQuota{CPU: resource.MustParse("4"), Memory: resource.MustParse("2Gi"),
		EphemeralStorage: resource.MustParse("10Gi"), Pods: 7, Functions: 3, ContainerCPU: resource.MustParse("500m")}})
	if q.Spec.Hard.Name("limits.cpu", "").String() != "4" || q.Spec.Hard.Name("requests.cpu", "").String() != "4" ||
		q.Spec.Hard.Name("limits.memory", "").String() != "2Gi" || q.Spec.Hard.Name("limits.ephemeral-storage", "").String() != "10Gi" ||
		q.Spec.Hard.Pods().Value() != 7 || q.Spec.Hard.Name(resources.QuotaFunctions, "").Value() != 3 {
		t.Errorf("configured quota %v", q.Spec.Hard)
	}
	if item := l.Spec.Limits[0]; item.Default.Cpu().String() != "500m" || item.Max.Cpu().String() != "500m" {
		t.Errorf("configured container CPU %+v", item)
	}
}

// tenantPods are the pods the operator makes in a tenant namespace, with the network-policy gate.
func tenantPods(ns string) map[string]corev1.PodSpec {
	f := fn()
	f.Namespace = ns
	fj := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "sum", Namespace: ns}, Spec: slessv1.FunctionJobSpec{FunctionRef: "hello", RunID: 1}}
	tr := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "daily", Namespace: ns}, Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "hello", Schedule: "0 9 * * *"}}
	dj, _ := resources.MakeDepsJob(resources.DepsJob{Namespace: ns, Name: "deps-abc", Function: "hello", RuntimeImage: image,
		Argv: []string{"true"}, OperatorImage: image, PushTo: "r/sless/deps/abc:latest", DepsDir: "/app/deps", PushSecret: "deps-abc-push"})
	pods := map[string]corev1.PodSpec{
		"function": resources.MakeDeployment(f, image, 1).Spec.Template.Spec,
		"job":      resources.MakeJob(fj, f, image).Spec.Template.Spec,
		"cron":     resources.MakeCronJob(tr, f, image).Spec.JobTemplate.Spec.Template.Spec,
		"deps":     dj.Spec.Template.Spec,
	}
	for k, p := range pods {
		resources.PolicyGate(&p, image)
		pods[k] = p
	}
	return pods
}

// Every emptyDir has a size limit, and a pod's containers may use at least what its emptyDirs
// hold (the kubelet evicts a pod whose local storage passes the sum of its containers' limits).
func TestEveryEmptyDirIsBounded(t *testing.T) {
	for name, pod := range tenantPods("ns") {
		var dirs resource.Quantity
		for _, v := range pod.Volumes {
			if v.EmptyDir == nil {
				continue
			}
			if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
				t.Errorf("%s: emptyDir %s has no size limit", name, v.Name)
				continue
			}
			dirs.Add(*v.EmptyDir.SizeLimit)
		}
		var podLimit resource.Quantity
		for _, c := range pod.Containers {
			l := c.Resources.Limits.StorageEphemeral()
			if l.IsZero() {
				l = &resources.DefaultEphemeralLimit // the LimitRange's default
			}
			podLimit.Add(*l)
		}
		if podLimit.Cmp(dirs) <= 0 {
			t.Errorf("%s: its containers may use %v of local storage, its emptyDirs hold %v", name, &podLimit, &dirs)
		}
	}
}

// On a real kube-apiserver (LimitRanger and ResourceQuota admission): with the quota's status
// written as the quota controller would (envtest runs none, and without a status the quota
// admits everything), every pod the operator makes is admitted, gets a CPU limit and
// ephemeral-storage requests and limits from the LimitRange, and is counted; a pod beyond the
// quota is refused.
func TestTenantPodsAdmittedUnderQuota(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	c := env.Client
	nsObj, objs := resources.TenantObjects("sless-00000000000000ee", resources.TenantConfig{OperatorNamespace: "sless-system"})
	if err := c.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	var quota *corev1.ResourceQuota
	for _, o := range objs {
		if err := c.Create(ctx, o.(client.Object)); err != nil {
			t.Fatal(err)
		}
		if q, ok := o.(*corev1.ResourceQuota); ok {
			quota = q
		}
	}
	quota.Status.Hard = quota.Spec.Hard.DeepCopy()
	quota.Status.Used = corev1.ResourceList{}
	for k := range quota.Spec.Hard {
		quota.Status.Used[k] = resource.MustParse("0")
	}
	if err := c.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// Quota admission reads quotas from an informer: wait until it refuses a pod of 17 default
	// containers (17 CPUs of limits, the quota is 16). A dry run records no usage.
	waitUntil(t, 10*time.Second, func() bool {
		err := c.Create(ctx, podOf(nsObj.Name, "probe", manyContainers(17)), client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota: sless-quota")
	}, "quota admission to see the quota's status")

	logCap := map[string]*resource.Quantity{} // of each pod's function container, as admitted
	for name, spec := range tenantPods(nsObj.Name) {
		pod := podOf(nsObj.Name, name, spec)
		if err := c.Create(ctx, pod); err != nil {
			t.Errorf("%s pod: %v", name, err)
			continue
		}
		for _, ct := range pod.Spec.Containers {
			if ct.Name == "function" {
				logCap[name] = ct.Resources.Limits.StorageEphemeral()
			}
		}
		for _, ct := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			r := ct.Resources
			if r.Limits.Cpu().IsZero() || r.Requests.Cpu().IsZero() || r.Limits.Memory().IsZero() ||
				r.Requests.StorageEphemeral().IsZero() || r.Limits.StorageEphemeral().IsZero() {
				t.Errorf("%s pod, container %s: resources as admitted %+v", name, ct.Name, r)
			}
		}
	}
	// Job and cron runs' output is tenant code's as an instance's is: their container's local
	// storage, which holds its log (the kubelet evicts the pod beyond it), is capped the same.
	for _, run := range []string{"job", "cron"} {
		if fc, rc := logCap["function"], logCap[run]; fc == nil || rc == nil || fc.IsZero() || rc.Cmp(*fc) != 0 {
			t.Errorf("the %s container's ephemeral-storage limit %v, the function container's %v: want the same cap", run, rc, fc)
		}
	}
	var got corev1.ResourceQuota
	if err := c.Get(ctx, client.ObjectKeyFromObject(quota), &got); err != nil {
		t.Fatal(err)
	}
	used := got.Status.Used
	// Per pod the larger of its containers' sum and its largest init container: 1 CPU each; 5Gi
	// of local storage for the install, 256Mi for each of the others.
	if used.Pods().Value() != 4 || used.Name("limits.ephemeral-storage", "").Cmp(resource.MustParse("5888Mi")) != 0 ||
		used.Name("limits.cpu", "").Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("usage after four pods (function, job, cron, deps): %v", used)
	}
	// Beyond the quota: a fifth pod of 13 containers asks for 13 more CPUs where 12 are left.
	err := c.Create(ctx, podOf(nsObj.Name, "too-big", manyContainers(13)))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: sless-quota") || !strings.Contains(err.Error(), "limits.cpu") {
		t.Errorf("a pod beyond the CPU quota: %v", err)
	}
}

func podOf(ns, name string, spec corev1.PodSpec) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

// manyContainers is a restricted pod of n containers that set no resources (the LimitRange's
// defaults apply: 1 CPU of limits each).
func manyContainers(n int) corev1.PodSpec {
	j := resources.MakeJob(&slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, fn(), image)
	spec := j.Spec.Template.Spec
	one := spec.Containers[0]
	one.Resources = corev1.ResourceRequirements{}
	spec.Containers = nil
	for i := range n {
		c := one
		c.Name = fmt.Sprintf("c%d", i)
		spec.Containers = append(spec.Containers, c)
	}
	return spec
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
