package controllers_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// slowBody sends a tenant's uploads at a trickle: a large image over a slow link.
type slowBody struct {
	r   io.ReadCloser
	ctx context.Context
}

func (b *slowBody) Read(p []byte) (int, error) {
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-time.After(250 * time.Millisecond):
	}
	return b.r.Read(p[:min(len(p), 16<<10)]) // 64 KiB/s
}

func (b *slowBody) Close() error { return b.r.Close() }

// One tenant's large builds must not stall another tenant's rollout: five builds of tenant A,
// each pushing a 4 MiB layer at 64 KiB/s (a minute each), are queued when tenant B's function is
// created; B is Ready within 30 s. With one reconcile at a time (controller-runtime's default),
// B waited behind A's first build at least.
func TestOneTenantsBuildsDoNotStallAnother(t *testing.T) {
	nsA, nsB := "sless-aaaaaaaaaaaaaaaa", "sless-bbbbbbbbbbbbbbbb"
	e := newFnEnv(t, nsA)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsB}}); err != nil {
		t.Fatal(err)
	}

	// The registry as the pipeline reaches it: A's uploads trickle.
	target, _ := url.Parse("http://" + e.reg)
	rp := httputil.NewSingleHostReverseProxy(target)
	pushing := make(chan string, 100)
	var (
		quit   context.Context
		cancel context.CancelFunc
	)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/"+nsA+"/") && (r.Method == http.MethodPatch || r.Method == http.MethodPut) && r.ContentLength != 0 {
			select {
			case pushing <- r.URL.Path:
			default:
			}
			r.Body = &slowBody{r: r.Body, ctx: quit}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	// The upload sits in loopback buffers once the builder gave up: the trickle ends with the test.
	quit, cancel = context.WithCancel(ctx)
	t.Cleanup(cancel)
	reg := strings.TrimPrefix(slow.URL, "http://")
	e.start(func(sc *startConfig) { sc.pipeline = append(sc.pipeline, build.WithRegistry(reg)) })

	big := make([]byte, 4<<20)
	rand.Read(big)
	for i := range 5 {
		name := fmt.Sprintf("large-%d", i)
		sum := e.upload(name, map[string]string{"handler.py": "def handle(e):\n    return 1\n", "model.bin": string(big)})
		e.create(name, sum)
	}
	select {
	case <-pushing:
	case <-time.After(60 * time.Second):
		t.Fatal("tenant A's builds never started pushing")
	}

	z, sum := zipBytes(map[string]string{"handler.py": "def handle(e):\n    return 'b'\n"})
	if err := e.code.Put(ctx, codestore.Key(nsB, "small", sum), strings.NewReader(string(z)), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: nsB},
		Spec: slessv1.FunctionSpec{Runtime: "python3.11", CodeSHA256: sum}}); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	deadline := start.Add(30 * time.Second)
	for {
		if err := e.c.Get(ctx, keyOf(nsB, "small"), &dep); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant B's function not built within 30 s while tenant A's builds run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := e.c.Status().Update(ctx, &dep); err != nil {
		t.Fatal(err)
	}
	var fn slessv1.Function
	for {
		if err := e.c.Get(ctx, keyOf(nsB, "small"), &fn); err == nil && fn.Status.Phase == apiv1.PhaseReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant B's function not Ready within 30 s: %+v", fn.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("tenant B's function Ready %v after it was created, with five builds of tenant A queued", time.Since(start).Round(time.Millisecond))

	// A's builds wait for A's one slot without holding a worker: the others say so.
	waiting := 0
	for i := range 5 {
		if f := e.fn(fmt.Sprintf("large-%d", i)); strings.Contains(f.Status.Message, "build slot") {
			waiting++
		}
	}
	if waiting < 3 {
		t.Errorf("%d of tenant A's five builds say they wait for a build slot", waiting)
	}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
