package controllers

import (
	"cmp"
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/runspec"
)

// LogKeeper keeps the log of each function pod that stops (scale-down, rollout, deletion) in the
// code store (fnlog.StoppedKey) so that GET …/logs still shows it for fnlog.KeepStopped, and
// deletes the kept logs older than that. It runs on the leader only (a manager.Runnable).
//
// It follows a pod's log from its first line once the pod is being deleted (or its phase is
// final) until its function container has exited, then saves what it read. What it cannot keep:
//   - a pod whose log is gone before it can be read: killed hard (a zero grace period), evicted
//     or lost with its node, or waiting longer than its grace period for a free slot;
//   - lines beyond the last fnlog.MaxLines (or MaxBytes) of a pod;
//   - output of containers that crashed and restarted before the last one (Kubernetes keeps
//     the previous container's log only);
//   - a pod stopping while the leader changes: the old leader saves what it had read when it
//     stepped down; the new one reads the pod again only if it is still there.
// The keeper reads pod logs (kubestore.Logs.FollowPod) as the controller.
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

type LogKeeper struct {
	// Informers gives the watch on pods (the manager's cache, which holds only function pods).
	Informers cache.Informers
	Code      codestore.Store
	// Follow emits every line of a function pod's log from the first until the pod is done
	// (kubestore.Logs.FollowPod).
	Follow func(ctx context.Context, ns, fn, pod string, emit func(apiv1.LogLine) error) error
	// MaxConcurrent bounds the pods followed at once (default 16); others wait for a slot.
	MaxConcurrent int
	// MaxBytes bounds the text kept of one pod (default fnlog.MaxBytes): with MaxConcurrent, the memory
	// the keeper may hold.
	MaxBytes int
	// CollectInterval is how often kept logs older than fnlog.KeepStopped are deleted (default
	// 5 min).
	CollectInterval time.Duration

	mu    sync.Mutex
	pods  map[types.UID]*keptPod
	wg    sync.WaitGroup
	slots chan struct{}
	// tenants counts each namespace's followed pods: one tenant whose pods ignore SIGTERM for
	// their whole grace period holds a quarter of the slots at most, not all of them.
	tenants map[string]int
	freed   *sync.Cond // on mu: a namespace's count went down
}

// keptPod is a pod the keeper has taken on: being followed, or done while the pod still exists
// (so that its later updates do not start it again).
type keptPod struct{ running, deleted bool }

// Start watches function pods and collects old kept logs until ctx ends; the logs being read
// then are saved as far as they got.
func (k *LogKeeper) Start(ctx context.Context) error {
	k.pods = map[types.UID]*keptPod{}
	k.slots = make(chan struct{}, cmp.Or(k.MaxConcurrent, 16))
	k.tenants = map[string]int{}
	k.freed = sync.NewCond(&k.mu)
	inf, err := k.Informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.seen(ctx, obj) },
		UpdateFunc: func(_, obj any) { k.seen(ctx, obj) },
		DeleteFunc: func(obj any) { k.gone(obj) },
	})
	if err != nil {
		return err
	}
	defer func() {
		inf.RemoveEventHandler(reg)
		k.wg.Wait()
	}()
	t := time.NewTicker(cmp.Or(k.CollectInterval, 5*time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if n, err := fnlog.CollectStopped(ctx, k.Code, time.Now()); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "deleting old logs of stopped pods")
		} else if n > 0 {
			log.FromContext(ctx).Info("deleted old logs of stopped pods", "count", n)
		}
	}
}

// seen starts keeping a function pod that is stopping.
func (k *LogKeeper) seen(ctx context.Context, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels[runspec.LabelRole] != string(runspec.RoleFunction) || p.Labels[runspec.LabelFunction] == "" {
		return
	}
	if p.DeletionTimestamp.IsZero() && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if ctx.Err() != nil || k.pods[p.UID] != nil {
		return
	}
	st := &keptPod{running: true}
	k.pods[p.UID] = st
	ns, fn, name, uid := p.Namespace, p.Labels[runspec.LabelFunction], p.Name, p.UID
	k.wg.Go(func() {
		k.keep(ctx, ns, fn, name)
		k.mu.Lock()
		defer k.mu.Unlock()
		st.running = false
		if st.deleted {
			delete(k.pods, uid)
		}
	})
}

// gone forgets a deleted pod once it is no longer followed.
func (k *LogKeeper) gone(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if st := k.pods[p.UID]; st != nil {
		if st.running {
			st.deleted = true
		} else {
			delete(k.pods, p.UID)
		}
	}
}

// keep follows one pod's log, holding its last lines, and saves them when it ends.
func (k *LogKeeper) keep(ctx context.Context, ns, fn, pod string) {
	if !k.takeTenant(ctx, ns) {
		return
	}
	defer k.releaseTenant(ns)
	select {
	case k.slots <- struct{}{}:
		defer func() { <-k.slots }()
	case <-ctx.Done():
		return
	}
	logger := log.FromContext(ctx).WithValues("namespace", ns, "function", fn, "pod", pod)
	tail := fnlog.NewTail(fnlog.MaxLines, cmp.Or(k.MaxBytes, fnlog.MaxBytes))
	err := k.Follow(ctx, ns, fn, pod, func(l apiv1.LogLine) error {
		tail.Add(l)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		logger.Info("reading a stopping pod's log", "error", err.Error())
	}
	lines := tail.Lines()
	if len(lines) == 0 {
		return
	}
	// Saved also when ctx ended (the leader stepping down): what was read is better than nothing.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := fnlog.Save(sctx, k.Code, fnlog.StoppedKey(ns, fn, pod), lines); err != nil {
		logger.Error(err, "saving a stopped pod's log")
	}
}

// takeTenant waits until ns follows fewer than a quarter of the slots (2 at least), and counts one more; false
// when ctx ended first.
func (k *LogKeeper) takeTenant(ctx context.Context, ns string) bool {
	stop := context.AfterFunc(ctx, func() {
		k.mu.Lock()
		k.freed.Broadcast()
		k.mu.Unlock()
	})
	defer stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.tenants[ns] >= max(2, cap(k.slots)/4) {
		if ctx.Err() != nil {
			return false
		}
		k.freed.Wait()
	}
	k.tenants[ns]++
	return true
}

func (k *LogKeeper) releaseTenant(ns string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.tenants[ns]--; k.tenants[ns] <= 0 {
		delete(k.tenants, ns)
	}
	k.freed.Broadcast()
}
