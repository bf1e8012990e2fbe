package kubestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/api/codestore"
	"github.com/sless-dev/sless/api/kubestore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/testenv"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

type fixed struct{ u *url.URL }

func (f fixed) Resolve(context.Context, string, string) (*url.URL, error) { return f.u, nil }

// The REST API on the Kubernetes store, against a real kube-apiserver: the same flow the
// single-host store serves.
func TestAPIOnKubestore(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	code, _ := codestore.NewDir(t.TempDir())
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	backend := kubestore.New(env.Client, code, resources.TenantConfig{OperatorNamespace: "sless-system", DockerConfigJSON: []byte(`{"auths":{}}`)}, fixed{u})
	secret := []byte("0123456789abcdef0123456789abcdef-kube")
	v, _ := auth.New(auth.WithHS256Secret(secret))
	srv, err := api.New(backend, api.WithVerifier(v), api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))), api.WithTempDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	token, _ := auth.IssueHS256(secret, "kube-user", time.Hour)
	c, _ := apiclient.New(hs.URL, token)
	ns := c.Namespace()

	if err := c.EnsureNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	var nsObj corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &nsObj); err != nil || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace %v %v", nsObj.Labels, err)
	}
	var secretObj corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sless-registry"}, &secretObj); err != nil {
		t.Errorf("pull secret: %v", err)
	}

	f, err := c.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11", EnvVars: map[string]string{"B": "2", "A": "1"}})
	if err != nil || f.Status.Phase != apiv1.PhasePending || f.MemoryMB != 128 {
		t.Fatalf("create: %+v %v", f, err)
	}
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11"}); !apiclient.IsAlreadyExists(err) {
		t.Errorf("duplicate: %v", err)
	}
	var crd slessv1.Function
	env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &crd)
	if len(crd.Spec.Env) != 2 || crd.Spec.Env[0].Name != "A" || crd.Status.URL == "" {
		t.Errorf("CRD %+v", crd)
	}
	z := testenv.Zip(map[string]string{"handler.py": "def handle(e): return 1\n"})
	up, err := c.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &crd)
	if crd.Spec.CodeSHA256 != up.CodeSHA256 {
		t.Errorf("the upload did not reach spec.codeSHA256: %q vs %q", crd.Spec.CodeSHA256, up.CodeSHA256)
	}
	f.MemoryMB = 256
	if got, err := c.UpdateFunction(ctx, *f); err != nil || got.MemoryMB != 256 || got.Status.CodeSHA256 != up.CodeSHA256 {
		t.Errorf("update: %+v %v", got, err)
	}
	// The reconciler's part, played here: Ready.
	env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &crd)
	crd.Status.Phase, crd.Status.Image = slessv1.PhaseReady, "r/x@sha256:"+strings.Repeat("a", 64)
	if err := env.Client.Status().Update(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(hs.URL + "/fn/" + ns + "/hello/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok /x" {
		t.Errorf("/fn/: %d %s", resp.StatusCode, body)
	}
	if inv, _ := c.Invocations(ctx, "hello"); len(inv) != 1 || inv[0].Status != 200 {
		t.Errorf("invocations %+v", inv)
	}

	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: "http", FunctionRef: "hello"}); err != nil {
		t.Fatal(err)
	}
	if tr, err := c.SetTriggerEnabled(ctx, "web", false); err != nil || tr.IsEnabled() {
		t.Errorf("disable: %+v %v", tr, err)
	}
	if code := get(t, hs.URL+"/fn/"+ns+"/hello"); code != 503 {
		t.Errorf("disabled: %d", code)
	}
	if l, _ := c.ListTriggers(ctx); len(l) != 1 {
		t.Errorf("triggers %v", l)
	}
	j, err := c.CreateJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", EventJSON: `{"input":[1]}`, RunID: 1})
	if err != nil || j.Status.Phase != apiv1.JobPending {
		t.Fatalf("job: %+v %v", j, err)
	}
	if j, err = c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", RunID: 2}); err != nil || j.RunID != 2 {
		t.Errorf("put job: %+v %v", j, err)
	}
	var ae *apiv1.Error
	if _, err := c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "hello", RunID: 1}); !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("lower run_id: %v", err)
	}

	// Another tenant sees nothing and creates nothing.
	other, _ := auth.IssueHS256(secret, "someone-else", time.Hour)
	req, _ := http.NewRequest("GET", hs.URL+"/v1/namespaces/"+ns+"/functions", nil)
	req.Header.Set("Authorization", "Bearer "+other)
	if r, _ := http.DefaultClient.Do(req); r.StatusCode != 404 {
		t.Errorf("another tenant: %d", r.StatusCode)
	}

	if err := c.DeleteNamespace(ctx); !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("delete with functions: %v", err)
	}
	for _, del := range []func() error{
		func() error { return c.DeleteJob(ctx, "sum") }, func() error { return c.DeleteTrigger(ctx, "web") },
		func() error { return c.DeleteFunction(ctx, "hello") }, func() error { return c.DeleteNamespace(ctx) },
	} {
		if err := del(); err != nil {
			t.Error(err)
		}
	}
	if err := c.DeleteFunction(ctx, "hello"); !apiclient.IsNotFound(err) {
		t.Errorf("delete missing: %v", err)
	}
}

func get(t *testing.T, u string) int {
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
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
	var nr *api.NotReadyError
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
