package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// The keeper on a real API server (no kubelet: the pod logs are played by Follow): a function pod
// being deleted has its log kept, the last fnlog.MaxLines of it; a deps pod's is not; no more pods
// are followed at once than allowed; a keeper that stops saves what it read; old kept logs go.
func TestLogKeeper(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	ns := "keeper"
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, _ := codestore.NewDir(dir)

	// An old kept log, for the collection.
	old := fnlog.StoppedKey(ns, "hello", "ancient")
	fnlog.Save(ctx, code, old, []apiv1.LogLine{{Line: "x"}})
	past := time.Now().Add(-2 * fnlog.KeepStopped)
	os.Chtimes(filepath.Join(dir, filepath.FromSlash(old)), past, past)

	// Pods named slow-* print two lines, then block until release closes (or the keeper stops);
	// others print MaxLines+5 lines.
	release := make(chan struct{})
	var running, peak atomic.Int32
	var mu sync.Mutex
	followed := map[string]int{}
	follow := func(ctx context.Context, ns, fn, pod string, emit func(apiv1.LogLine) error) error {
		mu.Lock()
		followed[fn+"/"+pod]++
		mu.Unlock()
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		lines := fnlog.MaxLines + 5
		if len(pod) > 5 && pod[:5] == "slow-" {
			lines = 2
		}
		for i := range lines {
			emit(apiv1.LogLine{Time: time.Now().UTC(), Instance: pod, Stream: apiv1.StreamOutput, Line: fmt.Sprintf("%s line %d", pod, i)})
		}
		if lines == 2 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}

	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	defer stopKeeper()
	go informers.Start(kctx)
	k := &controllers.LogKeeper{Informers: informers, Code: code, Follow: follow, MaxConcurrent: 2, CollectInterval: 100 * time.Millisecond}
	kept := make(chan error, 1)
	go func() { kept <- k.Start(kctx) }()

	// stop makes pod stop as the kubelet would see it: deleted, held by a finalizer (this API
	// server has no kubelet to finish the deletion).
	stop := func(name, fn string, r runspec.Role) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: resources.Labels(fn, r), Finalizers: []string{"test.sless.dev/hold"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "img"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	stop("hello-1", "hello", runspec.RoleFunction)
	stop("deps-1", "hello", runspec.RoleDeps)
	eventually(t, "hello-1's log kept", func() bool {
		l, _ := fnlog.Load[apiv1.LogLine](ctx, code, fnlog.StoppedKey(ns, "hello", "hello-1"))
		return len(l) == fnlog.MaxLines && l[0].Line == "hello-1 line 5" && l[len(l)-1].Line == fmt.Sprintf("hello-1 line %d", fnlog.MaxLines+4)
	})
	eventually(t, "the old kept log collected", func() bool {
		ok, _ := code.Exists(ctx, old)
		return !ok
	})

	// Three slow pods, two slots.
	for i := range 3 {
		stop(fmt.Sprintf("slow-%d", i), "slow", runspec.RoleFunction)
	}
	eventually(t, "two slow pods followed", func() bool { return running.Load() == 2 })
	time.Sleep(200 * time.Millisecond)
	if p := peak.Load(); p > 2 {
		t.Errorf("%d pods followed at once, want ≤ 2", p)
	}
	// An update of a pod being kept does not start it again.
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello-1"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	// The keeper stops (the leader steps down) with slow pods read in part: those are saved.
	time.Sleep(100 * time.Millisecond)
	stopKeeper()
	select {
	case err := <-kept:
		if err != nil {
			t.Errorf("the keeper: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper did not stop within 10 s")
	}
	saved := 0
	for i := range 3 {
		if l, _ := fnlog.Load[apiv1.LogLine](ctx, code, fnlog.StoppedKey(ns, "slow", fmt.Sprintf("slow-%d", i))); len(l) == 2 {
			saved++
		}
	}
	if saved != 2 {
		t.Errorf("%d slow pods' partial logs saved when the keeper stopped, want the 2 being read", saved)
	}
	mu.Lock()
	defer mu.Unlock()
	if followed["hello/deps-1"] != 0 {
		t.Error("a deps pod's log was kept")
	}
	if n := followed["hello/hello-1"]; n != 1 {
		t.Errorf("hello-1 followed %d times", n)
	}
}

// One namespace whose stopping pods never end holds a quarter of the keeper's slots: another
// namespace's stopping pod is followed at once all the same.
func TestLogKeeperSharesSlotsAmongTenants(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{"greedy", "quiet"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	code, _ := codestore.NewDir(t.TempDir())
	var mu sync.Mutex
	running := map[string]int{}
	follow := func(ctx context.Context, ns, fn, pod string, emit func(apiv1.LogLine) error) error {
		mu.Lock()
		running[ns]++
		mu.Unlock()
		defer func() { mu.Lock(); running[ns]--; mu.Unlock() }()
		<-ctx.Done() // never ends: SIGTERM ignored for the whole grace period
		return nil
	}
	count := func(ns string) int { mu.Lock(); defer mu.Unlock(); return running[ns] }
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	defer stopKeeper()
	go informers.Start(kctx)
	k := &controllers.LogKeeper{Informers: informers, Code: code, Follow: follow, MaxConcurrent: 8, CollectInterval: time.Hour}
	go k.Start(kctx)
	stop := func(ns, name string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: resources.Labels("fn", runspec.RoleFunction), Finalizers: []string{"test.sless.dev/hold"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "function", Image: "img"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		stop("greedy", fmt.Sprintf("fn-%d", i))
	}
	eventually(t, "the greedy namespace's share followed", func() bool { return count("greedy") == 2 })
	stop("quiet", "fn-0")
	eventually(t, "the quiet namespace's pod followed beside them", func() bool { return count("quiet") == 1 })
	time.Sleep(200 * time.Millisecond)
	if n := count("greedy"); n != 2 {
		t.Errorf("the greedy namespace follows %d pods, want its share of 2 (8 slots / 4)", n)
	}
}
