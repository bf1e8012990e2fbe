package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/faultproxy"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// The registry refuses every push (PUT, POST, PATCH) for a while, through a fault-injecting proxy
// in front of a real registry: the build is retried with the work queue's backoff, the status says
// what is wrong meanwhile (Building, with the registry's error and when the next attempt is, until
// the retry budget is spent: then Failed), the running version stays, and the Function converges
// to Ready on the new code once pushes work again, soon after. Each status is checked against
// package lifecycle (lifecycletest.Wrote), as the single host's are (local's TestBuildLifecycle).
func TestBuildRetriedWhileTheRegistryRefusesPushes(t *testing.T) {
	ns := "sless-fa0170000000000"
	reg := testenv.Registry(t)
	proxy, err := faultproxy.Start("127.0.0.1", "http://"+reg, faultproxy.WithMethods("PUT", "POST", "PATCH"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// The platform's registry is the proxy: the runtime image is mirrored through it, so the
	// function's pushes mount its layers as usual.
	e := &fnEnv{t: t, env: kubetest.Start(t), reg: proxy.Addr(), codeDir: t.TempDir(), ns: ns}
	e.c = e.env.Client
	e.code, _ = codestore.NewDir(e.codeDir)
	e.runtime = runtimeImage(t, e.reg)
	ctx := context.Background()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	e.start(nil)

	// converge waits until fn serves the image built from sum (playing the Deployment controller),
	// recording every status it goes through; it returns how long that took after start. Until
	// keepUntil the Deployment must keep running keep (the version serving before), if set.
	type seen struct {
		at             time.Duration
		phase, message string
		status         lifecycle.FunctionStatus
	}
	converge := func(t *testing.T, fn, sum string, start time.Time, within time.Duration, keep string, keepUntil time.Time) (time.Duration, []seen) {
		t.Helper()
		var statuses []seen
		deadline := start.Add(within)
		for {
			f := e.fn(fn)
			if n := len(statuses); n == 0 || statuses[n-1].phase != string(f.Status.Phase) || statuses[n-1].message != f.Status.Message {
				statuses = append(statuses, seen{time.Since(start), string(f.Status.Phase), f.Status.Message, f.Status.Lifecycle()})
			}
			if d := e.deployment(fn); keep != "" && time.Now().Before(keepUntil) && d.Spec.Template.Spec.Containers[0].Image != keep {
				t.Fatalf("during the fault the deployment runs %s, want the serving version %s", d.Spec.Template.Spec.Containers[0].Image, keep)
			}
			built := f.Status.BuiltCodeSHA256 == sum && f.Status.Image != ""
			if built && f.Status.Phase == apiv1.PhaseReady {
				return time.Since(start), statuses
			}
			if d := e.deployment(fn); built && d != nil && d.Spec.Template.Spec.Containers[0].Image == f.Status.Image &&
				(d.Status.ObservedGeneration != d.Generation || d.Status.AvailableReplicas != 1) {
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
				if err := e.c.Status().Update(ctx, d); err != nil {
					t.Log(err) // a newer Deployment: the next round
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not Ready on %s within %v; statuses %+v", fn, sum[:12], within, statuses)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// attempts groups refusals into build attempts (a pause of 500 ms or more separates two).
	attempts := func(rs []faultproxy.Refusal, start time.Time) []string {
		var out []string
		for i, r := range rs {
			if i == 0 || r.Time.Sub(rs[i-1].Time) >= 500*time.Millisecond {
				out = append(out, fmt.Sprintf("%.1fs", r.Time.Sub(start).Seconds()))
			}
		}
		return out
	}
	report := func(t *testing.T, what string, ready time.Duration, refused []faultproxy.Refusal, start time.Time, statuses []seen) {
		t.Logf("%s: Ready after %v; %d pushes refused, in bursts at %s", what, ready.Round(time.Millisecond), len(refused),
			strings.Join(attempts(refused, start), " "))
		for _, s := range statuses {
			msg := s.message
			if len(msg) > 160 {
				msg = "…" + msg[len(msg)-160:] // the registry's answer and the retry, at the end
			}
			t.Logf("  %6.2fs %-8s %q", s.at.Seconds(), s.phase, msg)
		}
	}
	// saying finds a status in phase naming the registry's answer and the next attempt, as
	// package lifecycle writes it: Building while the build is retried within the budget (so that
	// Terraform and the CLI wait on), whatever the registry's error.
	saying := func(t *testing.T, statuses []seen, phase apiv1.Phase, answer, retry string) bool {
		t.Helper()
		found := false
		for _, s := range statuses {
			if s.phase == string(phase) && strings.Contains(s.message, answer) && strings.Contains(s.message, retry) {
				found = true
				kind := lifecycletest.BuildRetrying
				if phase == apiv1.PhaseFailed {
					kind = lifecycletest.BuildExhausted
				}
				if err := lifecycletest.Wrote(kind, s.status); err != nil {
					t.Error(err)
				}
			}
		}
		return found
	}

	t.Run("5xx for 12 s while a version serves", func(t *testing.T) {
		// The real-cluster e2e holds it 20 s. ggcr retries a 5xx itself (1 s, then 3 s later),
		// and oci.Push once more with a fresh Pusher: one build attempt lasts about 8.5 s before
		// the reconciler sees the error, so a fault shorter than that never reaches it; 12 s
		// makes one attempt fail and the next one meet the end of the fault.
		const fault = 12 * time.Second
		sum1 := e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
		e.create("hello", sum1)
		converge(t, "hello", sum1, time.Now(), 60*time.Second, "", time.Time{})
		image1 := e.fn("hello").Status.Image

		proxy.SetStatus(500)
		sum2 := e.upload("hello", map[string]string{"handler.py": "def handle(e):\n    return 2\n"})
		before := proxy.Refused()
		proxy.FailFor(fault)
		start := time.Now()
		f := e.fn("hello")
		f.Spec.CodeSHA256 = sum2
		if err := e.c.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		ready, statuses := converge(t, "hello", sum2, start, fault+60*time.Second, image1, start.Add(fault))
		refused := proxy.Refusals()[before:]
		report(t, fmt.Sprintf("500 to pushes for %v", fault), ready, refused, start, statuses)
		if len(refused) == 0 {
			t.Fatal("no push was refused: the fault did not hit the build")
		}
		if !saying(t, statuses, apiv1.PhaseBuilding, "500 Internal Server Error", "retrying in") {
			t.Error("no status said the registry refused the push and when the build is retried")
		}
		// Before the first failure: the build started (ggcr retries the 5xx for seconds).
		started := slices.IndexFunc(statuses, func(s seen) bool { return s.phase == string(apiv1.PhaseBuilding) })
		if started < 0 {
			t.Error("never Building")
		} else if err := lifecycletest.Wrote(lifecycletest.BuildStarted, statuses[started].status); err != nil {
			t.Errorf("the build started: %v", err)
		}
		// Once the registry works the next attempt comes within the first backoff steps, not
		// minutes later; and nothing loops meanwhile (ggcr's own retries pace the requests).
		if ready > fault+10*time.Second {
			t.Errorf("Ready %v after the fault began (it lasted %v)", ready, fault)
		}
		if len(refused) > 5*int(fault/time.Second) {
			t.Errorf("%d pushes refused in %v: a loop", len(refused), fault)
		}
		if f := e.fn("hello"); f.Status.Message != "" || f.Status.FailedBuildKey != "" {
			t.Errorf("the failure did not clear: %+v", f.Status)
		}
	})

	t.Run("an error ggcr does not retry (403) for 5 s: the reconciler backs off, Building", func(t *testing.T) {
		// Before the build backoff this was a loop: each failure's status write started the next
		// attempt at once (600 refused pushes in 3 s, two status writes and an Event each).
		const fault = 5 * time.Second
		proxy.SetStatus(403)
		sum := e.upload("fast", map[string]string{"handler.py": "def handle(e):\n    return 3\n"})
		before := proxy.Refused()
		proxy.FailFor(fault)
		start := time.Now()
		e.create("fast", sum)
		ready, statuses := converge(t, "fast", sum, start, fault+60*time.Second, "", time.Time{})
		refused := proxy.Refusals()[before:]
		report(t, fmt.Sprintf("403 to pushes for %v", fault), ready, refused, start, statuses)
		bursts := attempts(refused, start)
		if len(refused) == 0 {
			t.Fatal("no push was refused")
		}
		if !saying(t, statuses, apiv1.PhaseBuilding, "403 Forbidden", "retrying in") {
			t.Error("no status said the registry refused the push and when the build is retried")
		}
		for _, s := range statuses {
			if s.phase == string(apiv1.PhaseFailed) {
				t.Errorf("Failed within the retry budget: %+v", s)
			}
		}
		// Attempts 1 s, 2 s, 4 s apart: at most 4 within 5 s (a loop made dozens), each
		// refused at its first request.
		if len(bursts) > 4 || len(refused) > 4*8 {
			t.Errorf("%d attempts, %d pushes refused in %v: not backing off", len(bursts), len(refused), fault)
		}
		for i := 1; i < len(refused); i++ {
			// Within one attempt, under a loaded CI, pushes were seen 110 ms apart: a gap under
			// 500 ms is the same attempt (as attempts() counts them), one from 500 to 900 ms is a
			// retry sooner than the first backoff step.
			if gap := refused[i].Time.Sub(refused[i-1].Time); gap >= 500*time.Millisecond && gap < 900*time.Millisecond {
				t.Errorf("attempts %v apart: less than the first backoff step", gap)
			}
		}
		// The next attempt after the fault ends comes within the backoff reached (4 s here).
		if ready > fault+6*time.Second {
			t.Errorf("Ready %v after the fault began (it lasted %v)", ready, fault)
		}
		if f := e.fn("fast"); f.Status.Message != "" {
			t.Errorf("the failure did not clear: %+v", f.Status)
		}
	})

	t.Run("403 beyond the retry budget: Failed, still retried, Ready once it passes", func(t *testing.T) {
		// RetryBudget attempts, RetryDelay(1..budget-1) apart: 1+2+4+8+16 s.
		proxy.SetStatus(403)
		sum := e.upload("spent", map[string]string{"handler.py": "def handle(e):\n    return 4\n"})
		proxy.Fail()
		start := time.Now()
		e.create("spent", sum)
		var waited time.Duration
		for n := 1; n < lifecycle.RetryBudget; n++ {
			waited += lifecycle.RetryDelay(n)
		}
		eventually := func(what string, within time.Duration, cond func(*slessv1.Function) bool) *slessv1.Function {
			t.Helper()
			deadline := time.Now().Add(within)
			for {
				f := e.fn("spent")
				if cond(f) {
					return f
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s not within %v: %+v", what, within, f.Status)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		f := eventually("Failed", waited+30*time.Second, func(f *slessv1.Function) bool { return f.Status.Phase == apiv1.PhaseFailed })
		if err := lifecycletest.Wrote(lifecycletest.BuildExhausted, f.Status.Lifecycle()); err != nil {
			t.Error(err)
		}
		if took := time.Since(start); took < waited {
			t.Errorf("Failed after %v: the budget's backoff alone is %v", took, waited)
		}
		if !strings.Contains(f.Status.Message, "403 Forbidden") || f.Status.BuildRetry == nil || int(f.Status.BuildRetry.Attempts) != lifecycle.RetryBudget {
			t.Errorf("spent: %+v", f.Status)
		}
		// Still retried (every RetryMax): the registry comes back, the function becomes Ready.
		proxy.Heal()
		ready, statuses := converge(t, "spent", sum, time.Now(), lifecycle.RetryMax+30*time.Second, "", time.Time{})
		report(t, "403 beyond the budget", ready, nil, start, statuses)
		if f := e.fn("spent"); f.Status.BuildRetry != nil || f.Status.Message != "" {
			t.Errorf("the failure did not clear: %+v", f.Status)
		}
	})
}
