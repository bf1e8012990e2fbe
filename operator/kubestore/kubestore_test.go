package kubestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

var shared kubetest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	stopProvisioner()
	shared.Stop()
	os.Exit(code)
}

// unprovisioned are the tenant namespaces the tests' controller leaves alone (TestEnsureWaitsForTheController).
var unprovisioned = []string{"sless-0000000000e05e10"}

var (
	provisionerOnce sync.Once
	stopProvisioner = func() {}
)

// provisioned runs the controller's TenantReconciler on the shared API server, as the controller
// leader does, so that the API's ensure answers: once per test binary, for every tenant namespace
// but the unprovisioned ones.
func provisioned(t testing.TB) client.Client {
	t.Helper()
	env := shared.Get(t)
	provisionerOnce.Do(func() {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		r := &controllers.TenantReconciler{Client: mgr.GetClient(), Tenant: resources.TenantConfig{OperatorNamespace: "sless-system",
			DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{}}`) }}}
		tenant := predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[runspec.LabelManagedBy] == runspec.ManagedBy && !slices.Contains(unprovisioned, o.GetName())
		})
		if err := ctrl.NewControllerManagedBy(mgr).Named("tenant").For(&corev1.Namespace{}, builder.WithPredicates(tenant)).Complete(r); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { mgr.Start(ctx); close(done) }()
		stopProvisioner = func() { cancel(); <-done }
	})
	return env.Client
}

// kubeBackend is the Kubernetes store on a real kube-apiserver (one per test binary: every Env is
// its own tenant, and a deleted namespace stays Terminating there, with no namespace controller).
var kubeBackend = apitest.Backend{Name: "kubestore", New: func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, apitest.Controller) {
	c := provisioned(t)
	b, err := kubestore.New(c, kubestore.WithCodeStore(code), kubestore.WithResolver(r),
		kubestore.WithTenant(resources.TenantConfig{OperatorNamespace: "sless-system", DockerConfigJSON: func(string) []byte { return []byte(`{"auths":{}}`) }}),
		kubestore.WithRuntimeImages(map[string]string{"nodejs22": "registry.test/sless/runtime/nodejs22@sha256:" + strings.Repeat("a", 64)}))
	if err != nil {
		t.Fatal(err)
	}
	return b, controller{c}
}}

// controller plays the reconcilers: it writes the CRDs' status with observedGeneration.
type controller struct{ c client.Client }

func (k controller) SetFunctionStatus(ns, name string, f func(*lifecycle.FunctionStatus)) error {
	ctx := context.Background()
	var fn slessv1.Function
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		return err
	}
	st := fn.Status.Lifecycle()
	f(&st)
	fn.Status.SetLifecycle(st, fn.Generation)
	fn.Status.ObservedGeneration = fn.Generation
	return k.c.Status().Update(ctx, &fn)
}

func (k controller) SetJobStatus(ns, name string, f func(*apiv1.JobStatus)) error {
	ctx := context.Background()
	var j slessv1.FunctionJob
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
		return err
	}
	st := j.Status.Wire()
	f(&st)
	j.Status.SetWire(st)
	j.Status.ObservedGeneration = j.Generation
	return k.c.Status().Update(ctx, &j)
}

// SetFunctionQuota sets the namespace's ResourceQuota to n functions and writes its status as the
// quota controller would (hard from the spec, used counted from what is there): envtest runs no
// quota controller, and the API server's quota admission enforces only what the status says.
// Admission reads quotas from an informer, so the status also carries a fence that alternates
// between writes (count/configmaps=0, or none): once a dry-run ConfigMap create answers as this
// write says, admission sees it.
func (k controller) SetFunctionQuota(ns string, n int) error {
	ctx := context.Background()
	var fl slessv1.FunctionList
	if err := k.c.List(ctx, &fl, client.InNamespace(ns)); err != nil {
		return err
	}
	var q corev1.ResourceQuota
	if err := k.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-quota"}, &q); err != nil {
		return err
	}
	q.Spec.Hard[resources.QuotaFunctions] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	if err := k.c.Update(ctx, &q); err != nil {
		return err
	}
	const fence = corev1.ResourceName("count/configmaps")
	_, fenced := q.Status.Hard[fence]
	fenced = !fenced
	q.Status.Hard, q.Status.Used = q.Spec.Hard.DeepCopy(), corev1.ResourceList{}
	for r := range q.Status.Hard {
		q.Status.Used[r] = resource.MustParse("0") // no pods run here
	}
	q.Status.Used[resources.QuotaFunctions] = *resource.NewQuantity(int64(len(fl.Items)), resource.DecimalSI)
	if fenced {
		q.Status.Hard[fence], q.Status.Used[fence] = resource.MustParse("0"), resource.MustParse("0")
	}
	if err := k.c.Status().Update(ctx, &q); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := k.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "fence", Namespace: ns}}, client.DryRunAll)
		refused := apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
		if err != nil && !refused {
			return err
		}
		if refused == fenced {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("quota admission did not see the quota's new status within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The API's conformance suite on the CRDs.
func TestConformance(t *testing.T) { apitest.Run(t, kubeBackend) }

// What only the Kubernetes store does: tenant namespaces with their policy objects, env vars in
// the spec sorted by name, the upload in spec.codeSHA256, and no status written by the API.
func TestKubernetesObjects(t *testing.T) {
	e := apitest.NewEnv(t, kubeBackend)
	ctx := context.Background()
	c := shared.Get(t).Client
	e.Ensure()
	var nsObj corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: e.NS}, &nsObj); err != nil || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace %v %v", nsObj.Labels, err)
	}
	var secretObj corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "sless-registry"}, &secretObj); err != nil {
		t.Errorf("pull secret: %v", err)
	}
	f, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11", EnvVars: map[string]string{"B": "2", "A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	z := apitest.ZipOf(t, map[string]string{"handler.py": "def handle(e): return 1\n"})
	up, err := e.C.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	f.MemoryMB = 256
	if _, err := e.C.UpdateFunction(ctx, *f); err != nil {
		t.Fatal(err)
	}
	var crd slessv1.Function
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "hello"}, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Env) != 2 || crd.Spec.Env[0].Name != "A" || crd.Spec.CodeSHA256 != up.CodeSHA256 || crd.Spec.MemoryMB != 256 {
		t.Errorf("spec %+v", crd.Spec)
	}
	if crd.Generation != 3 {
		t.Errorf("generation %d after create, upload and update; want 3", crd.Generation)
	}
	if crd.Status.Phase != "" || crd.Status.URL != "" || crd.Status.ObservedGeneration != 0 {
		t.Errorf("the API wrote status %+v: status is the reconcilers' alone", crd.Status)
	}
}

// A Function whose deletion has started (its finalizer still cleans up) is gone for /fn/ at once,
// though its pods may still run.
func TestDeletedFunctionIsGoneForFn(t *testing.T) {
	e := apitest.NewEnv(t, kubeBackend)
	ctx := context.Background()
	c := shared.Get(t).Client
	e.Ensure()
	e.Function("going")
	up, _ := apitest.EchoUpstream(t)
	e.Ready("going", up.URL)
	if code, _, b := e.Raw("GET", "/fn/"+e.NS+"/going", "", "", nil); code != 200 {
		t.Fatalf("before: %d %s", code, b)
	}
	var f slessv1.Function
	c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "going"}, &f)
	f.Finalizers = []string{"sless.dev/cleanup"}
	if err := c.Update(ctx, &f); err != nil {
		t.Fatal(err)
	}
	if err := e.C.DeleteFunction(ctx, "going"); err != nil {
		t.Fatal(err)
	}
	if code, ecode, b := e.Raw("GET", "/fn/"+e.NS+"/going", "", "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("after DELETE, with the finalizer still there: %d %s %s", code, ecode, b)
	}
	c.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: "going"}, &f)
	if f.DeletionTimestamp.IsZero() {
		t.Fatal("the Function is already gone: the test did not hold it")
	}
	f.Finalizers = nil
	c.Update(ctx, &f)
}

// /fn/ goes to a ready pod of the function's Service: read from its EndpointSlices (created here:
// envtest runs no EndpointSlice controller), skipping endpoints that are not ready or terminating,
// round-robin over the rest.
func TestEndpointResolver(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := "sless-00000000000000e1"
	env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	r := &kubestore.EndpointResolver{Reader: env.Client}
	var nr *objects.NotReadyError
	if _, err := r.Resolve(ctx, ns, "fn"); !errors.As(err, &nr) {
		t.Fatalf("no endpoints: %v", err)
	}
	yes, no := true, false
	port, portName := int32(8080), ""
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "fn-abc", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "fn"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.88.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
			{Addresses: []string{"10.88.0.8"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}},
		}}
	if err := env.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	other := slice.DeepCopy()
	other.Name, other.Labels, other.ResourceVersion = "other-abc", map[string]string{discoveryv1.LabelServiceName: "other"}, ""
	other.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.88.0.99"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(ctx, ns, "fn"); !errors.As(err, &nr) {
		t.Fatalf("only unready and terminating endpoints (and another service's): %v", err)
	}
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.88.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		discoveryv1.Endpoint{Addresses: []string{"10.88.0.10"}})
	if err := env.Client.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i := 0; i < 4; i++ {
		u, err := r.Resolve(ctx, ns, "fn")
		if err != nil {
			t.Fatal(err)
		}
		seen[u.Host]++
	}
	if len(seen) != 2 || seen["10.88.0.9:8080"] != 2 || seen["10.88.0.10:8080"] != 2 {
		t.Errorf("picked %v, want 10.88.0.9:8080 and 10.88.0.10:8080 in turn", seen)
	}
}

// The activator's view: ready pods and pods not ready yet that have an address (probed by /fn/
// itself), never terminating ones; named by pod.
func TestEndpointInstances(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := "sless-00000000000000e2"
	env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	r := &kubestore.EndpointResolver{Reader: env.Client}
	if l, err := r.Instances(ctx, ns, "fn"); err != nil || len(l) != 0 {
		t.Fatalf("no endpoints: %v %v", l, err)
	}
	yes, no := true, false
	port := int32(8080)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "fn-abc", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "fn"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.88.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "fn-starting"}},
			{Addresses: []string{"10.88.0.8"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "fn-going"}},
			{Addresses: []string{"10.88.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "fn-ready"}},
		}}
	if err := env.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	l, err := r.Instances(ctx, ns, "fn")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, in := range l {
		got[in.ID] = fmt.Sprintf("%s %v", in.URL.Host, in.Ready)
	}
	want := map[string]string{"fn-starting": "10.88.0.7:8080 false", "fn-ready": "10.88.0.9:8080 true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("instances %v, want %v", got, want)
	}
}

// The ScaleLimited condition the FunctionReconciler sets when the tenant's quota stops a scale-up
// reaches /fn/ two ways: status.scale_limited on the API, and the resolver's ScaleLimited (which
// answers held requests).
func TestScaleLimitedReachesTheAPI(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := "sless-00000000000000e3"
	env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "f"}, Spec: slessv1.FunctionSpec{Runtime: "python3.11"}}
	if err := env.Client.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	r := &kubestore.EndpointResolver{Reader: env.Client}
	if r.ScaleLimited(ctx, ns, "f") || r.ScaleLimited(ctx, ns, "missing") {
		t.Fatal("limited before any condition")
	}
	fn.Apply(lifecycle.Scaled{Replicas: 1, Desired: 3, Limited: `scale-up stopped at 1 of 3 replicas by the tenant quota "sless-tenant"`}, time.Now())
	if err := env.Client.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
	if !r.ScaleLimited(ctx, ns, "f") {
		t.Error("the resolver does not see the ScaleLimited condition")
	}
	store, err := kubestore.New(env.Client, kubestore.WithResolver(r))
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.Functions.Get(ctx, ns, "f")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Status.ScaleLimited {
		t.Errorf("status.scale_limited: %+v", got.Status)
	}
}
