package k8s_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
)

// Autoscaling on the real cluster: idle → no pod; the first request through /fn/ is held while
// a pod starts, and answers; 30 concurrent clients scale out with no failed request; idle again →
// back to zero. (The install shortens the decider's windows: 10 s stable, 2 s panic.)
func TestAutoscalingOnKubernetes(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("scale"))
	ctx := context.Background()
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "burst", Runtime: "python3.11", Concurrency: 2, MaxReplicas: 5, IdleTimeoutSec: 5}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "burst", "python3.11", map[string]string{"handler.py": "import time\n\ndef handle(event):\n    time.sleep(0.1)\n    return 'ok'\n"})
	ns := c.Namespace()
	atZero := func() bool {
		d := deployment(t, ns, "burst")
		return d != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0
	}
	waitFor(t, "scaled to zero after the idle timeout", 2*time.Minute, atZero)
	// The status follows the Deployment within 2 s.
	var got *apiv1.Function
	for limit := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, _ = c.GetFunction(ctx, "burst")
		if got != nil && got.Status.Replicas == 0 && got.Status.DesiredReplicas == 0 && got.Status.Phase == apiv1.PhaseReady || time.Now().After(limit) {
			break
		}
	}
	if got == nil || got.Status.Replicas != 0 || got.Status.DesiredReplicas != 0 || got.Status.Phase != apiv1.PhaseReady {
		t.Errorf("status 2 s after the Deployment reached zero: %+v", got)
	}

	start := time.Now()
	if code, body := get(f.Status.URL); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("the first request at zero: %d %s", code, body)
	}
	t.Logf("cold start through /fn/: %v", time.Since(start).Round(time.Millisecond))
	// status.replicas follows the Deployment's ready replicas within 2 s (the kubelet marks the pod
	// Ready a moment after /fn/'s own probe passed).
	var depReady, fnReady time.Time
	for limit := time.Now().Add(20 * time.Second); time.Now().Before(limit) && fnReady.IsZero(); time.Sleep(50 * time.Millisecond) {
		if d := deployment(t, ns, "burst"); depReady.IsZero() && d != nil && d.Status.ReadyReplicas >= 1 {
			depReady = time.Now()
		}
		if got, err := c.GetFunction(ctx, "burst"); err == nil && got.Status.Replicas >= 1 {
			fnReady = time.Now()
		}
	}
	switch {
	case fnReady.IsZero():
		t.Errorf("status.replicas never showed the cold-started pod")
	case !depReady.IsZero() && fnReady.Sub(depReady) > 2*time.Second:
		t.Errorf("status.replicas showed the ready pod %v after the Deployment did, want ≤ 2 s", fnReady.Sub(depReady))
	default:
		t.Logf("status.replicas 1 at %v (Deployment ready at %v) after the request", fnReady.Sub(start).Round(time.Millisecond), depReady.Sub(start).Round(time.Millisecond))
	}
	// Where the time went (second resolution, as the API server keeps it): the pod's creation
	// and its conditions, relative to the request.
	var pods corev1.PodList
	if err := cluster.Kube.List(ctx, &pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			line := fmt.Sprintf("pod %s created %+.0fs", p.Name, p.CreationTimestamp.Sub(start).Seconds())
			for _, c := range p.Status.Conditions {
				line += fmt.Sprintf(", %s %+.0fs", c.Type, c.LastTransitionTime.Sub(start).Seconds())
			}
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if r := cs.State.Running; r != nil {
					line += fmt.Sprintf(", %s running %+.0fs", cs.Name, r.StartedAt.Sub(start).Seconds())
				} else if tm := cs.State.Terminated; tm != nil {
					line += fmt.Sprintf(", %s %s %+.0fs..%+.0fs", cs.Name, tm.Reason, tm.StartedAt.Sub(start).Seconds(), tm.FinishedAt.Sub(start).Seconds())
				}
			}
			t.Log(line)
		}
	}

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var peak atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code, body := get(f.Status.URL); code == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", code, body))
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && peak.Load() < 3 {
		if d := deployment(t, ns, "burst"); d != nil && d.Status.ReadyReplicas > peak.Load() {
			peak.Store(d.Status.ReadyReplicas)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("30 clients: %d answered, %d failed (first: %v); up to %d ready pods", ok.Load(), failed.Load(), firstErr.Load(), peak.Load())
	if failed.Load() != 0 {
		t.Errorf("%d requests failed under load (first: %v)", failed.Load(), firstErr.Load())
	}
	if peak.Load() < 3 {
		t.Errorf("30 clients at concurrency 2 reached only %d ready pods", peak.Load())
	}
	waitFor(t, "back to zero after the load", 2*time.Minute, atZero)
}
