package controllers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	"github.com/sless-dev/sless/oci"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/runspec"
)

// manifestCode is the registry's answer to a HEAD of image ("repo@sha256:…").
func manifestCode(t *testing.T, image string) int {
	t.Helper()
	ref, err := name.NewDigest(image)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodHead, "http://"+ref.Context().RegistryStr()+"/v2/"+ref.Context().RepositoryStr()+"/manifests/"+ref.DigestStr(), nil)
	// Without these, a registry may answer 404 for a manifest it has.
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// An earlier version's image is deleted once the next one is rolled out; a deleted Function's
// images go with it, and when the registry refuses, the finalizer gives up after CleanupTimeout,
// records the image, and the Collector deletes it later.
func TestImagesCollected(t *testing.T) {
	ns, opNS := "sless-0123456789abcdee", "sless-system"
	e := newFnEnv(t, ns)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opNS}}); err != nil {
		t.Fatal(err)
	}
	// The registry as the operator reaches it; deletes can be refused.
	var refuseDeletes atomic.Bool
	target, _ := url.Parse("http://" + e.reg)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && refuseDeletes.Load() {
			http.Error(w, "read-only", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	reg := strings.TrimPrefix(proxy.URL, "http://")
	r, _ := e.start(func(sc *startConfig) {
		sc.pipeline = append(sc.pipeline, build.WithRegistry(reg))
		sc.reconciler = func(r *controllers.FunctionReconciler) { r.CleanupTimeout, r.OperatorNamespace = 2*time.Second, opNS }
	})

	ready := func(image string) {
		t.Helper()
		eventually(t, "a deployment of a new image", func() bool {
			d := e.deployment("hello")
			return d != nil && d.Spec.Template.Spec.Containers[0].Image != image && strings.Contains(d.Spec.Template.Spec.Containers[0].Image, "@sha256:")
		})
		d := e.deployment("hello")
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if err := e.c.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, "Ready", func() bool { f := e.fn("hello"); return f.Status.Phase == apiv1.PhaseReady && f.Status.Image != image })
	}
	e.create("hello", e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 1\n"}))
	ready("")
	image1 := e.fn("hello").Status.Image

	f := e.fn("hello")
	sum2 := e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 2\n"})
	f.Spec.CodeSHA256 = sum2
	if err := e.c.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	ready(image1)
	image2 := e.fn("hello").Status.Image
	eventually(t, "the first version's image deleted", func() bool { return manifestCode(t, image1) == 404 })
	if code := manifestCode(t, image2); code != 200 {
		t.Fatalf("the serving image: %d", code)
	}

	// A run created with image2 that has not started yet keeps image2 through the next rollout.
	run := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "hello-run", Namespace: ns, Labels: map[string]string{runspec.LabelFunction: "hello"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "run", Image: image2}}}}}}
	if err := e.c.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	f = e.fn("hello")
	f.Spec.CodeSHA256 = e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 3\n"})
	if err := e.c.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	ready(image2)
	image3 := e.fn("hello").Status.Image
	if code := manifestCode(t, image2); code != 200 {
		t.Errorf("the image of a run still to start was deleted: %d", code)
	}
	// Back to the second version (the same digest again); the run is finished by then.
	run.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	run.Status.StartTime, run.Status.CompletionTime = &metav1.Time{Time: time.Now()}, &metav1.Time{Time: time.Now()}
	run.Status.Succeeded = 1
	if err := e.c.Status().Update(ctx, run); err != nil {
		t.Fatal(err)
	}
	f = e.fn("hello")
	f.Spec.CodeSHA256 = sum2
	if err := e.c.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	ready(image3)
	if img := e.fn("hello").Status.Image; img != image2 {
		t.Fatalf("the second version rebuilt as %s, not %s", img, image2)
	}
	eventually(t, "the third version's image deleted", func() bool { return manifestCode(t, image3) == 404 })

	// The registry refuses: the Function still goes, and says what it left behind.
	deleteRefused := func() {
		t.Helper()
		refuseDeletes.Store(true)
		defer refuseDeletes.Store(false)
		if err := e.c.Delete(ctx, e.fn("hello")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// While its finalizer retries (CleanupTimeout), the status says it is being deleted.
		eventually(t, "Deleting", func() bool {
			f := e.fn("hello")
			c := meta.FindStatusCondition(f.Status.Conditions, slessv1.FunctionReady)
			return c != nil && c.Reason == apiv1.ReasonDeleting
		})
		if err := lifecycletest.Wrote(lifecycletest.Deleting, e.fn("hello").Status.Lifecycle()); err != nil {
			t.Error(err)
		}
		eventually(t, "the function to go", func() bool {
			return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, &slessv1.Function{}))
		})
		t.Logf("deleted %v after the delete with the registry refusing", time.Since(start).Round(100*time.Millisecond))
		// envtest runs no garbage collector: play it for what the Function owned.
		e.c.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns}})
		e.c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns}})
	}
	deleteRefused()
	var cm corev1.ConfigMap
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: controllers.OrphanedImagesConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != 1 || !containsValue(cm.Data, ns+"/hello/", " "+image2) {
		t.Fatalf("orphans %v, want %s/hello's %s", cm.Data, ns, image2)
	}
	eventually(t, "a CleanupAbandoned event", func() bool {
		var evs corev1.EventList
		e.c.List(ctx, &evs, client.InNamespace(ns))
		for _, ev := range evs.Items {
			if ev.Reason == "CleanupAbandoned" && strings.Contains(ev.Message, ns+"/hello") {
				return true
			}
		}
		return false
	})

	col := &controllers.Collector{Client: e.c, Pipeline: r.Pipeline, Namespace: opNS}
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if code := manifestCode(t, image2); code != 404 {
		t.Errorf("the orphaned image after a collection: %d", code)
	}
	e.c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: controllers.OrphanedImagesConfigMap}, &cm)
	if len(cm.Data) != 0 {
		t.Errorf("orphans left: %v", cm.Data)
	}

	// Re-created with the same code, the function's image has the recorded digest again: a
	// collection must leave it to the new Function.
	// (The finalizer deleted the stored code: upload it again.)
	recreate := func() {
		if sum := e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 2\n"}); sum != sum2 {
			t.Fatal("the same archive hashed differently")
		}
		e.create("hello", sum2)
		ready("")
	}
	recreate()
	deleteRefused()
	recreate()
	if img := e.fn("hello").Status.Image; img != image2 {
		t.Fatalf("rebuilt as %s, want the same digest %s", img, image2)
	}
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if code := manifestCode(t, image2); code != 200 {
		t.Errorf("the re-created function's image after a collection: %d", code)
	}
	e.c.Get(ctx, client.ObjectKey{Namespace: opNS, Name: controllers.OrphanedImagesConfigMap}, &cm)
	if len(cm.Data) != 0 {
		t.Errorf("the re-created function's record is left: %v", cm.Data)
	}
}

func containsValue(m map[string]string, prefix, suffix string) bool {
	for _, x := range m {
		if strings.HasPrefix(x, prefix) && strings.HasSuffix(x, suffix) {
			return true
		}
	}
	return false
}

// The Collector deletes the dependency layers no Function's build records, with their pins, and
// none while a build is in progress.
func TestCollectorDependencyLayers(t *testing.T) {
	ns, opNS := "sless-0123456789abcded", "sless-system"
	e := newFnEnv(t, ns)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opNS}}); err != nil {
		t.Fatal(err)
	}
	b, _ := oci.NewBuilder()
	pipeline, err := build.New(e.code, b, build.WithRegistry(e.reg))
	if err != nil {
		t.Fatal(err)
	}
	store, err := deps.NewRegistryStore(e.reg + "/sless/deps")
	if err != nil {
		t.Fatal(err)
	}
	pins := &controllers.ConfigMapPins{Client: e.c, Reader: e.c, Namespace: opNS}
	used, unused := strings.Repeat("a", 64), strings.Repeat("b", 64)
	digests := map[string]v1.Hash{}
	for _, k := range []string{used, unused} {
		l, err := layers.FromFS(fstest.MapFS{"six.py": {Data: []byte("x = '" + k + "'\n")}}, layers.WithPrefix("/app/deps"))
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.Put(ctx, k, l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := deps.Pinned(ctx, pins, k, stored, "/app/deps"); err != nil {
			t.Fatal(err)
		}
		digests[k], _ = stored.Digest()
	}
	withStatus := func(name string, st slessv1.FunctionStatus) {
		f := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: slessv1.FunctionSpec{Runtime: "python3.11", CodeSHA256: strings.Repeat("0", 64)}}
		if err := e.c.Create(ctx, f); err != nil {
			t.Fatal(err)
		}
		f.Status = st
		if err := e.c.Status().Update(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	withStatus("uses", slessv1.FunctionStatus{Phase: apiv1.PhaseReady, Build: &slessv1.BuildStatus{Key: "k", DepsKey: used}})
	withStatus("building", slessv1.FunctionStatus{Phase: apiv1.PhaseBuilding})
	col := &controllers.Collector{Client: e.c, Pipeline: pipeline, Pins: pins, Namespace: opNS}
	exists := func(k string) bool {
		_, err := store.Get(ctx, k)
		return err == nil
	}

	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(unused) {
		t.Fatal("a layer collected while a build was in progress")
	}
	f := e.fn("building")
	f.Status.Phase = apiv1.PhaseFailed
	if err := e.c.Status().Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := col.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(unused) || !exists(used) {
		t.Errorf("after a collection: unused layer exists %v, used %v", exists(unused), exists(used))
	}
	if p, _ := pins.Pin(ctx, unused); p != "" {
		t.Errorf("the collected layer's pin is left: %s", p)
	}
	if p, _ := pins.Pin(ctx, used); p != digests[used].String() {
		t.Errorf("the used layer's pin: %q", p)
	}
}
