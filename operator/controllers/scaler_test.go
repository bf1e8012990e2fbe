package controllers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/autoscale"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
)

// fakeLoad is what /fn/ reports, set by the test.
type fakeLoad struct {
	mu      sync.Mutex
	load    activator.Load
	insts   []activator.Instance
	partial bool
}

func (f *fakeLoad) Loads(context.Context) (controllers.Loads, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return controllers.Loads{Functions: []activator.Load{f.load}, Partial: f.partial}, nil
}

func (f *fakeLoad) Instances(context.Context, string, string) ([]activator.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]activator.Instance(nil), f.insts...), nil
}

// startScaler runs a Scaler on e's API server with a manual clock (advance moves it), a 20 ms
// tick and fl as the replicas' load and the instances, until the test ends.
func startScaler(t *testing.T, e *fnEnv) (s *controllers.Scaler, fl *fakeLoad, clock func() time.Time, advance func(time.Duration)) {
	var clockMu sync.Mutex
	now := time.Now()
	clock = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance = func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	decider, err := autoscale.New(autoscale.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	fl = &fakeLoad{}
	s = controllers.NewScaler(controllers.Scaler{Client: e.c, Instances: fl, Loads: fl, Decider: decider, Tick: 20 * time.Millisecond, Now: clock})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Start(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, fl, clock, advance
}

func (f *fakeLoad) set(l activator.Load, insts ...activator.Instance) {
	f.mu.Lock()
	f.load, f.insts = l, insts
	f.mu.Unlock()
}

// The Scaler on a real API server: a held request scales a function from zero, load beyond
// twice the capacity scales it up at once, and idle instances go (those marked to go first)
// after the idle timeout, down to min_replicas.
func TestScalerScalesTheDeployment(t *testing.T) {
	ns := "sless-0123456789abcdec"
	e := newFnEnv(t, ns)
	ctx := context.Background()
	s, fl, clock, advance := startScaler(t, e)

	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "hot", Namespace: ns},
		Spec: slessv1.FunctionSpec{Runtime: "python3.11", MinReplicas: 0, MaxReplicas: 5, Concurrency: 10, IdleTimeoutSec: 5}}
	if err := e.c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status = slessv1.FunctionStatus{Phase: apiv1.PhaseReady, Image: e.reg + "/" + ns + "/hot@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	if err := e.c.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	labels := map[string]string{"app": "hot"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hot", Namespace: ns}, Spec: appsv1.DeploymentSpec{Replicas: &zero,
		Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fn", Image: fn.Status.Image}}}}}}
	if err := e.c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	replicas := func() int32 {
		var d appsv1.Deployment
		e.c.Get(ctx, client.ObjectKeyFromObject(dep), &d)
		return *d.Spec.Replicas
	}
	load := func(inFlight, held int, idle ...activator.InstanceLoad) activator.Load {
		return activator.Load{Namespace: ns, Name: "hot", InFlight: inFlight, Held: held, Instances: idle}
	}

	// A request held with nothing running: one instance at once (a poke, not the next tick).
	fl.set(load(0, 1))
	start := time.Now()
	s.Poke(ns, "hot")
	eventually(t, "a scale from zero", func() bool { return replicas() == 1 })
	t.Logf("scaled from zero %v after the poke", time.Since(start).Round(time.Millisecond))
	// The decision's time is stamped on the Deployment, not on its pod template (no rollout).
	var scaled appsv1.Deployment
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(dep), &scaled); err != nil {
		t.Fatal(err)
	}
	if at, err := time.Parse(time.RFC3339Nano, scaled.Annotations[controllers.AnnotationScaledAt]); err != nil || !at.Equal(clock()) {
		t.Errorf("%s = %q (%v), want the decision's time %v", controllers.AnnotationScaledAt, scaled.Annotations[controllers.AnnotationScaledAt], err, clock())
	}
	if _, ok := scaled.Spec.Template.Annotations[controllers.AnnotationScaledAt]; ok {
		t.Error("the scale-up changed the pod template")
	}

	// 40 in flight on one instance of concurrency 10: beyond twice the capacity, 4 at once.
	pod := func(id string) activator.Instance { return activator.Instance{ID: id, Ready: true} }
	fl.set(load(40, 0, activator.InstanceLoad{ID: "hot-1", InFlight: 10, LastActive: clock()}), pod("hot-1"))
	eventually(t, "a panic scale-up to 4", func() bool { return replicas() == 4 })

	// Idle: every instance goes after the idle timeout (min_replicas 0), marked to go first.
	var ids []activator.Instance
	for _, id := range []string{"hot-1", "hot-2", "hot-3", "hot-4"} {
		ids = append(ids, pod(id))
		if err := e.c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fn", Image: "x"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	fl.set(load(0, 0), ids...)
	time.Sleep(100 * time.Millisecond) // some ticks at the current time: nothing may go yet
	if r := replicas(); r != 4 {
		t.Fatalf("scaled to %d before the idle timeout", r)
	}
	advance(2 * autoscale.DefaultStableWindow)
	eventually(t, "a scale to zero after the idle timeout", func() bool { return replicas() == 0 })
	var p corev1.Pod
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hot-1"}, &p); err != nil || p.Annotations["controller.kubernetes.io/pod-deletion-cost"] != "-1000" {
		t.Errorf("the idle pod was not marked to go first: %v %v", p.Annotations, err)
	}
}

// A replica of /fn/ that stops answering makes no instance look idle: while it is still listed
// nothing is scaled down (Partial), and once its load is gone, an instance it kept busy counts as
// busy until the idle timeout from when the Scaler last saw it so, not from its older LastActive
// or from when the decider first saw it.
func TestScalerAMissingReplicaMakesNoInstanceIdle(t *testing.T) {
	ns := "sless-0123456789abcded"
	e := newFnEnv(t, ns)
	ctx := context.Background()
	_, fl, clock, advance := startScaler(t, e)

	const idle = 300 * time.Second
	dep := runningFunction(t, e, "busy", slessv1.FunctionSpec{Runtime: "python3.11", MaxReplicas: 5, Concurrency: 10, IdleTimeoutSec: int32(idle / time.Second)}, 2)
	replicas := func() int32 {
		var d appsv1.Deployment
		e.c.Get(ctx, client.ObjectKeyFromObject(dep), &d)
		return *d.Spec.Replicas
	}
	pods := []activator.Instance{{ID: "busy-1", Ready: true}, {ID: "busy-2", Ready: true}}
	// Short requests keep both instances busy, each through its own /fn/ replica: both report
	// a fresh LastActive, and nothing is in flight when the loads are read.
	both := func() activator.Load {
		return activator.Load{Namespace: ns, Name: "busy", Instances: []activator.InstanceLoad{
			{ID: "busy-1", LastActive: clock()}, {ID: "busy-2", LastActive: clock()}}}
	}
	ticks := func() { time.Sleep(150 * time.Millisecond) }
	for range 7 { // past the idle timeout since the decider first saw them, and past the windows
		fl.set(both(), pods...)
		advance(idle / 6)
		ticks()
	}
	if r := replicas(); r != 2 {
		t.Fatalf("busy instances scaled to %d", r)
	}

	// The replica in front of busy-2 stops answering and is still listed: its load is unknown.
	fl.mu.Lock()
	fl.partial = true
	fl.mu.Unlock()
	onlyOne := func() activator.Load {
		return activator.Load{Namespace: ns, Name: "busy", Instances: []activator.InstanceLoad{{ID: "busy-1", LastActive: clock()}}}
	}
	for range 3 {
		fl.set(onlyOne(), pods...)
		advance(idle / 2)
		ticks()
		if r := replicas(); r != 2 {
			t.Fatalf("scaled to %d while a /fn/ replica's load is unknown", r)
		}
	}

	// The replica answers again (busy-2 is busy), then leaves the slices: the view is whole
	// without busy-2's load. It was last seen busy just now; it goes one idle timeout later, not
	// at once (its LastActive is gone with the replica, and the decider first saw it long ago).
	fl.set(both(), pods...)
	ticks()
	fl.mu.Lock()
	fl.partial = false
	fl.mu.Unlock()
	fl.set(onlyOne(), pods...)
	advance(idle / 2)
	ticks()
	if r := replicas(); r != 2 {
		t.Fatalf("busy-2 stopped %v after it was last seen busy (idle timeout %v): %d replicas", idle/2, idle, r)
	}
	advance(idle / 2)
	eventually(t, "busy-2 stopped after the idle timeout", func() bool { fl.set(onlyOne(), pods...); return replicas() == 1 })
}

// runningFunction makes a built function and its Deployment at replicas, as the reconciler would.
func runningFunction(t *testing.T, e *fnEnv, name string, spec slessv1.FunctionSpec, replicas int32) *appsv1.Deployment {
	t.Helper()
	ctx := context.Background()
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: spec}
	if err := e.c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status = slessv1.FunctionStatus{Phase: apiv1.PhaseReady, Image: e.reg + "/" + e.ns + "/" + name + "@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	if err := e.c.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: appsv1.DeploymentSpec{Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fn", Image: fn.Status.Image}}}}}}
	if err := e.c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	return dep
}
