package controllers_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/internal/kubetest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
	"github.com/sless-dev/sless/runspec"
)

// FunctionJob and Trigger reconcilers on envtest. No kubelet or Job controller runs there: the test
// plays them, creating the Job's pod with the termination message job mode writes and marking the
// Job complete.
func TestFunctionJobAndTrigger(t *testing.T) {
	env := kubetest.Start(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.FunctionJobReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorderFor("sless-operator")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&controllers.TriggerReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), PublicURL: "http://api.test",
		Recorder: mgr.GetEventRecorderFor("sless-operator")}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go mgr.Start(ctx)
	c := env.Client
	ns := "sless-00000000000000aa"
	c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	fn := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: "sum", Namespace: ns}, Spec: slessv1.FunctionSpec{Runtime: "python3.11", TimeoutSec: 30}}
	if err := c.Create(ctx, fn); err != nil {
		t.Fatal(err)
	}
	fn.Status.Image = "registry.test/" + ns + "/sum@sha256:" + strings.Repeat("a", 64)
	if err := c.Status().Update(ctx, fn); err != nil {
		t.Fatal(err)
	}

	getJob := func(name string) *slessv1.FunctionJob {
		var fj slessv1.FunctionJob
		c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fj)
		return &fj
	}
	finish := func(jobName, message string) {
		var job batchv1.Job
		eventually(t, "job "+jobName, func() bool { return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: jobName}, &job) == nil })
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: jobName + "-pod", Namespace: ns, Labels: map[string]string{"job-name": jobName}},
			Spec: job.Spec.Template.Spec}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "function", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: message}}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		job.Status.StartTime, job.Status.CompletionTime = &now, &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		if err := c.Status().Update(ctx, &job); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("run_id 0 is Skipped", func(t *testing.T) {
		c.Create(ctx, &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: ns}, Spec: slessv1.FunctionJobSpec{FunctionRef: "sum"}})
		eventually(t, "Skipped", func() bool { return getJob("later").Status.Phase == "Skipped" })
	})
	t.Run("a run's result comes from the termination message", func(t *testing.T) {
		c.Create(ctx, &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: ns},
			Spec: slessv1.FunctionJobSpec{FunctionRef: "sum", RunID: 1, EventJSON: `{"input":[100,200,300]}`}})
		eventually(t, "Running", func() bool { return getJob("run").Status.Phase == "Running" })
		var job batchv1.Job
		c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "run-run-1"}, &job)
		if env := job.Spec.Template.Spec.Containers[0].Env; !hasEnv(env, "EVENT_JSON", `{"input":[100,200,300]}`) || !hasEnv(env, "JOB_MODE", "1") {
			t.Errorf("job env %v", env)
		}
		finish("run-run-1", `{"sum": 600}`)
		eventually(t, "Succeeded", func() bool { return getJob("run").Status.Phase == "Succeeded" })
		if fj := getJob("run"); fj.Status.Message != `{"sum": 600}` || fj.Status.LastRunID != 1 || fj.Status.CompletionTime == nil {
			t.Errorf("status %+v", fj.Status)
		}
		for _, want := range []string{"Started:run_id 1 started as Job run-run-1", `Succeeded:run_id 1: {"sum": 600}`} {
			eventually(t, "event "+want, func() bool {
				var evs corev1.EventList
				c.List(ctx, &evs, client.InNamespace(ns))
				for _, e := range evs.Items {
					if e.InvolvedObject.Kind == "FunctionJob" && e.InvolvedObject.Name == "run" && e.Reason+":"+e.Message == want {
						return true
					}
				}
				return false
			})
		}
	})
	t.Run("a higher run_id runs again", func(t *testing.T) {
		fj := getJob("run")
		fj.Spec.RunID, fj.Spec.EventJSON = 2, `{"input":[1,2]}`
		if err := c.Update(ctx, fj); err != nil {
			t.Fatal(err)
		}
		finish("run-run-2", `{"sum": 3}`)
		eventually(t, "the second run", func() bool { f := getJob("run"); return f.Status.LastRunID == 2 && f.Status.Message == `{"sum": 3}` })
	})
	// The message is at most 4 KiB, its end kept, as the kubelet clips a termination message;
	// the status and the run's Event carry no more, whatever wrote the pod's status.
	t.Run("a run's message is clipped to 4 KiB", func(t *testing.T) {
		fj := getJob("run")
		fj.Spec.RunID = 3
		if err := c.Update(ctx, fj); err != nil {
			t.Fatal(err)
		}
		finish("run-run-3", strings.Repeat("ж", 32<<10)+"THE END")
		eventually(t, "the third run to succeed", func() bool { f := getJob("run"); return f.Status.LastRunID == 3 && f.Status.Phase == "Succeeded" })
		msg := getJob("run").Status.Message
		if len(msg) > runspec.MaxResultBytes || !strings.HasSuffix(msg, "жTHE END") || !strings.HasPrefix(msg, "…") || !utf8.ValidString(msg) {
			t.Errorf("a 64 KiB termination message became a status message of %d bytes: %.40q…%q", len(msg), msg, msg[max(0, len(msg)-20):])
		}
		eventually(t, "the run's Event, clipped", func() bool {
			var evs corev1.EventList
			c.List(ctx, &evs, client.InNamespace(ns))
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "run" && strings.HasPrefix(e.Message, "run_id 3: ") {
					return len(e.Message) <= runspec.MaxResultBytes+len("run_id 3: ")
				}
			}
			return false
		})
	})
	t.Run("cron trigger becomes a CronJob; http trigger gets the URL", func(t *testing.T) {
		c.Create(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "daily", Namespace: ns},
			Spec: slessv1.TriggerSpec{Type: "cron", FunctionRef: "sum", Schedule: "0 9 * * *"}})
		var cj batchv1.CronJob
		eventually(t, "the CronJob", func() bool { return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cron-daily"}, &cj) == nil })
		if cj.Spec.Schedule != "0 9 * * *" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image != fn.Status.Image {
			t.Errorf("cronjob %+v", cj.Spec)
		}
		eventually(t, "a CronJobCreated event", func() bool { return hasEvent(ctx, c, ns, "daily", "CronJobCreated", fn.Status.Image) })
		// A rebuilt function: the next cron run uses the new image.
		c.Get(ctx, client.ObjectKeyFromObject(fn), fn)
		fn.Status.Image = "registry.test/" + ns + "/sum@sha256:" + strings.Repeat("b", 64)
		if err := c.Status().Update(ctx, fn); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the CronJob on the new image", func() bool {
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cron-daily"}, &cj)
			return cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image == fn.Status.Image
		})
		eventually(t, "a CronJobUpdated event", func() bool { return hasEvent(ctx, c, ns, "daily", "CronJobUpdated", fn.Status.Image) })
		c.Create(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: slessv1.TriggerSpec{Type: "http", FunctionRef: "sum"}})
		eventually(t, "the URL", func() bool {
			var tr slessv1.Trigger
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &tr)
			return tr.Status.URL == "http://api.test/fn/"+ns+"/sum" && tr.Status.Active
		})
	})
}

func hasEvent(ctx context.Context, c client.Client, ns, object, reason, contains string) bool {
	var evs corev1.EventList
	c.List(ctx, &evs, client.InNamespace(ns))
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == object && e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

func hasEnv(env []corev1.EnvVar, k, v string) bool {
	for _, e := range env {
		if e.Name == k && e.Value == v {
			return true
		}
	}
	return false
}
