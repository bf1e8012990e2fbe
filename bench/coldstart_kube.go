package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/sless-dev/sless/internal/k1n"
)

// podTimes is when a watch from the host first saw a pod reach each stage.
type podTimes struct {
	name                                                       string
	created, scheduled, ip, initialized, running, kubeletReady time.Time
	initStarted, initFinished                                  metav1.Time // the kubelet's (seconds)
	hasInit                                                    bool
}

// podWatch follows the pods matching sel in ns and records when each stage was first seen.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]*podTimes
	stop func()
}

func watchPods(ctx context.Context, kc kubernetes.Interface, ns, sel string) (*podWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	pw := &podWatch{pods: map[string]*podTimes{}}
	see := func(p *corev1.Pod) {
		if p.DeletionTimestamp != nil {
			return
		}
		now := time.Now()
		pw.mu.Lock()
		defer pw.mu.Unlock()
		t := pw.pods[p.Name]
		if t == nil {
			t = &podTimes{name: p.Name, created: now}
			pw.pods[p.Name] = t
		}
		set := func(at *time.Time, cond bool) {
			if cond && at.IsZero() {
				*at = now
			}
		}
		t.hasInit = len(p.Spec.InitContainers) > 0
		set(&t.scheduled, p.Spec.NodeName != "")
		set(&t.ip, p.Status.PodIP != "")
		for _, c := range p.Status.Conditions {
			set(&t.initialized, c.Type == corev1.PodInitialized && c.Status == corev1.ConditionTrue)
			set(&t.kubeletReady, c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		for _, cs := range p.Status.ContainerStatuses {
			set(&t.running, cs.State.Running != nil)
		}
		for _, cs := range p.Status.InitContainerStatuses {
			if tm := cs.State.Terminated; tm != nil {
				t.initStarted, t.initFinished = tm.StartedAt, tm.FinishedAt
			}
		}
	}
	// List, then watch from the list's version; again whenever the watch ends early (a watch
	// the server closes would otherwise lose the stages that follow).
	listWatch := func() (watch.Interface, error) {
		l, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			see(&l.Items[i])
		}
		return kc.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
	}
	w, err := listWatch()
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	pw.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for {
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && ev.Type != watch.Bookmark {
					see(p)
				}
			}
			w.Stop()
			for {
				if ctx.Err() != nil {
					return
				}
				if w, err = listWatch(); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return pw, nil
}

// first is the first pod seen (a cold start makes one), nil if none.
func (pw *podWatch) first() *podTimes {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var f *podTimes
	for _, t := range pw.pods {
		if f == nil || t.created.Before(f.created) {
			f = t
		}
	}
	if f == nil {
		return nil
	}
	c := *f
	return &c
}

// kube is the cluster as the benchmark drives it.
type kube struct {
	kc  kubernetes.Interface
	env *k1n.Env
}

// deployment is the Deployment ns/name.
func (k *kube) deployment(ctx context.Context, ns, name string) (*appsv1.Deployment, error) {
	return k.kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
}

// waitZero waits until the Deployment is at zero and no pod of it is left (terminating included).
func (k *kube) waitZero(ctx context.Context, ns, name string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		d, err := k.deployment(ctx, ns, name)
		if err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0 {
			pods, err := k.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set(d.Spec.Selector.MatchLabels).String()})
			if err == nil && len(pods.Items) == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/%s not at zero pods within %v", ns, name, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watchScaleUp records when a watch from the host first saw the Deployment's spec.replicas above 0.
func (k *kube) watchScaleUp(ctx context.Context, ns, name string) (func() time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := k.kc.AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		return nil, err
	}
	var at atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
				at.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
	}()
	return func() time.Time {
		cancel()
		w.Stop()
		<-done
		if v := at.Load(); v != 0 {
			return time.Unix(0, v)
		}
		return time.Time{}
	}, nil
}

func runKubectl(ctx context.Context, env *k1n.Env, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, env.Kubectl[0], append(env.Kubectl[1:], args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
