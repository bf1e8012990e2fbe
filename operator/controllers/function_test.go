package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
)

func runtimeImage(t *testing.T, reg string) string { return testenv.RuntimeImage(t, reg) }

func zipBytes(files map[string]string) ([]byte, string) {
	z := testenv.Zip(files)
	sum := sha256.Sum256(z)
	return z, hex.EncodeToString(sum[:])
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The Function reconciler on a real kube-apiserver (envtest), a real registry and a real code
// store. envtest runs no kubelet and no controller-manager: the test marks Deployments available
// itself, and nothing garbage-collects owned objects.
func TestFunctionReconciler(t *testing.T) {
	ns := "sless-0123456789abcdef"
	e := newFnEnv(t, ns)
	r, _ := e.start(nil)
	ctx := context.Background()
	c, code, codeDir, reg, upload := e.c, e.code, e.codeDir, e.reg, e.upload
	key := client.ObjectKey{Namespace: ns, Name: "hello"}
	getFn := func() *slessv1.Function { return e.fn("hello") }
	getDep := func() *appsv1.Deployment { return e.deployment("hello") }
	markAvailable := func() {
		d := getDep()
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if err := c.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	sum1 := upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	if err := c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: "python3.11", CodeSHA256: sum1, Env: []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}}}); err != nil {
		t.Fatal(err)
	}
	var image1 string
	t.Run("built and deployed by digest", func(t *testing.T) {
		eventually(t, "the deployment", func() bool {
			d := getDep()
			return d != nil && strings.Contains(d.Spec.Template.Spec.Containers[0].Image, "@sha256:")
		})
		f := getFn()
		image1 = f.Status.Image
		if f.Status.BuiltCodeSHA256 != sum1 || !strings.HasPrefix(image1, reg+"/"+ns+"/hello@sha256:") || f.Status.URL != "http://api.test/fn/"+ns+"/hello" {
			t.Errorf("status %+v", f.Status)
		}
		if d := getDep(); d.Spec.Template.Spec.Containers[0].Image != image1 {
			t.Errorf("deployment runs %s, built %s", d.Spec.Template.Spec.Containers[0].Image, image1)
		}
		// The Service is applied right after the Deployment, in the same reconcile.
		eventually(t, "the service", func() bool { return c.Get(ctx, key, &corev1.Service{}) == nil })
		if f.Status.Phase == apiv1.PhaseReady {
			t.Error("Ready before the deployment is available")
		}
		eventually(t, "Starting", func() bool {
			c := meta.FindStatusCondition(getFn().Status.Conditions, slessv1.FunctionReady)
			return c != nil && c.Reason == apiv1.ReasonStarting
		})
		wrote(t, lifecycletest.Starting, getFn())
		markAvailable()
		eventually(t, "Ready", func() bool { return getFn().Status.Phase == apiv1.PhaseReady })
		wrote(t, lifecycletest.BuildSucceeded, getFn())
		wrote(t, lifecycletest.Ready, getFn())
		if !controllersHasFinalizer(getFn()) {
			t.Error("no finalizer")
		}
	})
	// Events are how `kubectl describe` explains a build; they are written asynchronously.
	eventFor := func(t *testing.T, name, typ, reason, contains string) {
		t.Helper()
		eventually(t, reason+" event on "+name, func() bool {
			var evs corev1.EventList
			c.List(ctx, &evs, client.InNamespace(ns))
			for _, e := range evs.Items {
				if e.InvolvedObject.Kind == "Function" && e.InvolvedObject.Name == name && e.Type == typ && e.Reason == reason && strings.Contains(e.Message, contains) {
					return true
				}
			}
			return false
		})
	}
	t.Run("a Built event names the image", func(t *testing.T) {
		eventFor(t, "hello", corev1.EventTypeNormal, "Built", image1)
	})
	t.Run("unchanged reconcile writes nothing", func(t *testing.T) {
		waitCached(t, r, getFn())
		waitCached(t, r, getDep())
		f0, d0 := getFn().ResourceVersion, getDep().ResourceVersion
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		if f1, d1 := getFn().ResourceVersion, getDep().ResourceVersion; f1 != f0 || d1 != d0 {
			t.Errorf("resourceVersions moved: function %s→%s deployment %s→%s", f0, f1, d0, d1)
		}
	})
	t.Run("code change rolls out a new digest", func(t *testing.T) {
		sum2 := upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 2\n"})
		f := getFn()
		f.Spec.CodeSHA256 = sum2
		if err := c.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the new image in the deployment", func() bool {
			d := getDep()
			return d != nil && d.Spec.Template.Spec.Containers[0].Image != image1 && d.Spec.Template.Spec.Containers[0].Image == getFn().Status.Image
		})
		// Mid-rollout, as the Deployment controller reports it: the new pod created but not yet
		// available, the old one still serving. Not Ready: the new code does not answer yet.
		d := getDep()
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		if err := c.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		// A reconcile that sees this rollout state (the cache has it) must not say Ready.
		waitCached(t, r, d)
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		if f := getFn(); f.Status.Phase == apiv1.PhaseReady {
			t.Errorf("Ready while the old pod still serves: %+v", f.Status)
		}
		markAvailable()
		eventually(t, "Ready once rolled out", func() bool { return getFn().Status.Phase == apiv1.PhaseReady })
	})
	t.Run("a rollout past its progress deadline reports StartFailed", func(t *testing.T) {
		d := getDep()
		if d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds != 180 {
			t.Errorf("progressDeadlineSeconds %v", d.Spec.ProgressDeadlineSeconds)
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
				Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "hello-abc" has timed out progressing.`}}}
		if err := c.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		eventually(t, "StartFailed", func() bool {
			f := getFn()
			return f.Status.Phase == apiv1.PhaseFailed && strings.Contains(f.Status.Message, "timed out progressing")
		})
		wrote(t, lifecycletest.StartFailed, getFn())
		markAvailable()
		eventually(t, "Ready once it recovers", func() bool { return getFn().Status.Phase == apiv1.PhaseReady })
	})
	// GET …/events: after the build's steps, each version's Starting and Ready once, and a start
	// that failed, in the order they happened.
	t.Run("lifecycle events", func(t *testing.T) {
		var reasons []string
		eventually(t, "the recovery's Ready event", func() bool {
			evs, _ := fnlog.LoadEvents(ctx, code, ns, "hello")
			reasons = reasons[:0]
			for _, e := range evs {
				if e.Reason == apiv1.ReasonStarting || e.Reason == apiv1.ReasonReady || e.Reason == apiv1.ReasonFailed {
					reasons = append(reasons, e.Reason)
				}
			}
			return len(reasons) > 0 && reasons[len(reasons)-1] == apiv1.ReasonReady && slices.Contains(reasons, apiv1.ReasonFailed)
		})
		want := []string{apiv1.ReasonStarting, apiv1.ReasonReady, apiv1.ReasonStarting, apiv1.ReasonReady, apiv1.ReasonFailed, apiv1.ReasonReady}
		if !slices.Equal(reasons, want) {
			t.Errorf("lifecycle events %v, want %v", reasons, want)
		}
		evs, _ := fnlog.LoadEvents(ctx, code, ns, "hello")
		for _, e := range evs {
			if e.Reason == apiv1.ReasonFailed && (e.Type != apiv1.EventWarning || !strings.Contains(e.Message, "timed out progressing")) {
				t.Errorf("the start failure's event: %+v", e)
			}
			if e.CodeSHA256 == "" {
				t.Errorf("an event without its code: %+v", e)
			}
		}
		if c := meta.FindStatusCondition(getFn().Status.Conditions, slessv1.FunctionReady); c == nil || c.Reason != apiv1.ReasonReady {
			t.Errorf("the Ready condition: %+v", c)
		}
	})
	t.Run("an owned deployment deleted is restored", func(t *testing.T) {
		if err := c.Delete(ctx, getDep()); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deployment to come back", func() bool { d := getDep(); return d != nil && d.DeletionTimestamp.IsZero() })
	})
	t.Run("disabled by its http trigger: replicas 0", func(t *testing.T) {
		no := false
		if err := c.Create(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: slessv1.TriggerSpec{Type: "http", FunctionRef: "hello", Enabled: &no}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replicas 0", func() bool { d := getDep(); return d != nil && *d.Spec.Replicas == 0 })
		eventually(t, "Disabled", func() bool { return getFn().Status.IsDisabled() })
		wrote(t, lifecycletest.Disabled, getFn())
		if f := getFn(); f.Status.Phase != apiv1.PhaseReady || f.Status.Message != "stopped: disabled by trigger web" {
			t.Errorf("disabled: %+v", f.Status)
		}
	})
	t.Run("a bad archive fails the function without a hot loop", func(t *testing.T) {
		bad := upload("broken", map[string]string{"../escape.py": "x"})
		if err := c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: ns},
			Spec: slessv1.FunctionSpec{Runtime: "python3.11", CodeSHA256: bad}}); err != nil {
			t.Fatal(err)
		}
		var f slessv1.Function
		eventually(t, "Failed", func() bool {
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, &f)
			return f.Status.Phase == apiv1.PhaseFailed && f.Status.FailedBuildKey != ""
		})
		if !strings.Contains(f.Status.Message, "unsafe path") {
			t.Errorf("message %q", f.Status.Message)
		}
		wrote(t, lifecycletest.BuildFailedUser, &f)
		eventFor(t, "broken", corev1.EventTypeWarning, "BuildFailed", "unsafe path")
		// Any event reconciles it again: that must neither build nor write (the failure latched).
		rv, builds := f.ResourceVersion, e.builds.Load()
		waitCached(t, r, &f)
		for range 3 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "broken"}}); err != nil {
				t.Fatal(err)
			}
		}
		c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, &f)
		if f.ResourceVersion != rv || e.builds.Load() != builds {
			t.Errorf("the failed function is built again: resourceVersion %s → %s, builds %d → %d", rv, f.ResourceVersion, builds, e.builds.Load())
		}
	})
	t.Run("a function without code waits for it", func(t *testing.T) {
		if err := c.Create(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: ns},
			Spec: slessv1.FunctionSpec{Runtime: "python3.11"}}); err != nil {
			t.Fatal(err)
		}
		var f slessv1.Function
		eventually(t, "Pending", func() bool {
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "empty"}, &f)
			return f.Status.Phase == apiv1.PhasePending && f.Status.ObservedGeneration == f.Generation
		})
		wrote(t, lifecycletest.WaitingForCode, &f)
	})
	t.Run("delete cleans code and image", func(t *testing.T) {
		img := getFn().Status.Image
		if err := c.Delete(ctx, getFn()); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the function to go", func() bool {
			var f slessv1.Function
			return apierrors.IsNotFound(c.Get(ctx, key, &f))
		})
		for _, sum := range []string{sum1} {
			if ok, _ := code.Exists(ctx, codestore.Key(ns, "hello", sum)); ok {
				t.Error("stored code left")
			}
		}
		if entries, _ := os.ReadDir(filepath.Join(codeDir, "code", ns, "hello")); len(entries) != 0 {
			t.Errorf("stored code left: %v", entries)
		}
		// (A HEAD without Accept headers was answered 404 for an image that was there.)
		if code := manifestCode(t, img); code != 404 {
			t.Errorf("image still in the registry: %d", code)
		}
	})
}

// wrote checks that f's status is what package lifecycle writes for a transition of kind k: the
// single host's controller is checked the same way (local's TestBuildLifecycle, TestSlessUp).
func wrote(t *testing.T, k lifecycletest.Kind, f *slessv1.Function) {
	t.Helper()
	if err := lifecycletest.Wrote(k, f.Status.Lifecycle()); err != nil {
		t.Error(err)
	}
}

// waitCached waits until the reconciler's cache holds obj as it is (or newer): a reconcile called
// after it sees what the test wrote.
func waitCached(t *testing.T, r *controllers.FunctionReconciler, obj client.Object) {
	t.Helper()
	want, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	eventually(t, "the cache to hold "+obj.GetName(), func() bool {
		cur := obj.DeepCopyObject().(client.Object)
		if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return false
		}
		got, _ := strconv.ParseUint(cur.GetResourceVersion(), 10, 64)
		return got >= want
	})
}

func controllersHasFinalizer(f *slessv1.Function) bool {
	for _, x := range f.Finalizers {
		if x == controllers.Finalizer {
			return true
		}
	}
	return false
}

// A Function built by an operator before the shared build pipeline kept its build identity in an
// annotation (code, runtime digest and entrypoint, each shortened): the new operator takes it over
// without building again or rolling the Deployment, and drops the annotation.
func TestAdoptsFunctionsOfAnEarlierOperator(t *testing.T) {
	e := newFnEnv(t, "sless-00000000000000ad")
	ctx := context.Background()
	_, stop := e.start(nil)
	sum := e.upload("old", map[string]string{"handler.py": "def handle(e):\n    return 'old'\n"})
	e.create("old", sum)
	eventually(t, "the deployment", func() bool { return e.deployment("old") != nil })
	d := e.deployment("old")
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := e.c.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Ready", func() bool { return e.fn("old").Status.Phase == apiv1.PhaseReady })
	stop()

	// What the earlier operator left: the annotation, and a status without the build's key.
	f := e.fn("old")
	image := f.Status.Image
	_, digest, _ := strings.Cut(e.runtime, "@sha256:")
	f.Annotations = map[string]string{"sless.dev/built-for": sum[:12] + "." + digest[:12] + ".handler.handle"}
	if err := e.c.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	f.Status.Build = &slessv1.BuildStatus{DurationMS: 12}
	if err := e.c.Status().Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	depVersion, builds := e.deployment("old").ResourceVersion, e.builds.Load()

	e.start(nil)
	eventually(t, "the build identity in the status", func() bool {
		f := e.fn("old")
		return f.Status.Build != nil && f.Status.Build.Key != "" && f.Annotations["sless.dev/built-for"] == ""
	})
	f = e.fn("old")
	if f.Status.Image != image || f.Status.Phase != apiv1.PhaseReady || e.builds.Load() != builds {
		t.Errorf("adopted as %+v after %d builds (image was %s): nothing should have been built", f.Status, e.builds.Load()-builds, image)
	}
	if d := e.deployment("old"); d.ResourceVersion != depVersion || d.Spec.Template.Spec.Containers[0].Image != image {
		t.Errorf("the Deployment changed (%s → %s, image %s)", depVersion, d.ResourceVersion, d.Spec.Template.Spec.Containers[0].Image)
	}
}
