package controllers_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/oci"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
)

// fnEnv is a Function reconciler on envtest with a real registry and a directory code store, in
// one namespace. envtest runs no kubelet and no controller-manager: tests play their part
// (Deployments available, Jobs finished, pods' termination messages).
type fnEnv struct {
	t       *testing.T
	env     *kubetest.Env
	c       client.Client
	reg     string
	code    codestore.Store
	codeDir string
	ns      string
	runtime string
	// builds counts the builds the reconcilers finished (succeeded or failed).
	builds atomic.Int64
}

// startConfig is what a test may change before a reconciler starts.
type startConfig struct {
	builder  []oci.Option
	pipeline []build.Option
	deps     *controllers.DepsConfig
	// reconciler adjusts the reconciler before it starts.
	reconciler func(*controllers.FunctionReconciler)
}

func newFnEnv(t *testing.T, ns string) *fnEnv {
	t.Helper()
	e := &fnEnv{t: t, env: kubetest.Start(t), reg: testenv.Registry(t), codeDir: t.TempDir(), ns: ns}
	e.c = e.env.Client
	e.code, _ = codestore.NewDir(e.codeDir)
	e.runtime = runtimeImage(t, e.reg)
	if err := e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start runs a manager with a Function reconciler until the returned stop is called (or the test
// ends); configure adjusts what it is made of before it starts.
func (e *fnEnv) start(configure func(*startConfig)) (*controllers.FunctionReconciler, func()) {
	t := e.t
	t.Helper()
	var sc startConfig
	if configure != nil {
		configure(&sc)
	}
	b, err := oci.NewBuilder(sc.builder...)
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]build.Option{build.WithRegistry(e.reg), build.WithRuntimes(map[string]string{"python3.11": e.runtime}),
		build.WithObserver(func(build.Observation) { e.builds.Add(1) })}, sc.pipeline...)
	pipeline, err := build.New(e.code, b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.FunctionReconciler{Pipeline: pipeline, Code: e.code, PublicURL: "http://api.test", Deps: sc.deps}
	mgr, err := ctrl.NewManager(e.env.Config, ctrl.Options{Scheme: e.env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", // Several managers run the same controllers in one test binary (and a restart test two in turn).
		Controller:             config.Controller{SkipNameValidation: &skipNameValidation}})
	if err != nil {
		t.Fatal(err)
	}
	r.Client, r.APIReader, r.Scheme, r.Recorder = mgr.GetClient(), mgr.GetAPIReader(), mgr.GetScheme(), mgr.GetEventRecorderFor("sless-operator")
	if sc.reconciler != nil {
		sc.reconciler(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mgr.Start(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return r, stop
}

var skipNameValidation = true

func (e *fnEnv) upload(fn string, files map[string]string) string {
	e.t.Helper()
	z, sum := zipBytes(files)
	if err := e.code.Put(context.Background(), codestore.Key(e.ns, fn, sum), bytes.NewReader(z), int64(len(z))); err != nil {
		e.t.Fatal(err)
	}
	return sum
}

func (e *fnEnv) create(name, sum string) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: slessv1.FunctionSpec{Runtime: "python3.11", CodeSHA256: sum}}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fnEnv) fn(name string) *slessv1.Function {
	var f slessv1.Function
	e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &f)
	return &f
}

func (e *fnEnv) deployment(name string) *appsv1.Deployment {
	var d appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: name}, &d); err != nil {
		return nil
	}
	return &d
}

// finishJob plays the Job controller and kubelet: a pod with the given termination state of
// container name, then the Job's terminal conditions.
func (e *fnEnv) finishJob(job *batchv1.Job, init bool, container string, exit int32, message string) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-pod", Namespace: job.Namespace, Labels: map[string]string{"job-name": job.Name}},
		Spec: job.Spec.Template.Spec}
	if err := e.c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := []corev1.ContainerStatus{{Name: container, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: "Error", Message: message}}}}
	if init {
		pod.Status.InitContainerStatuses = st
	} else {
		pod.Status.ContainerStatuses = st
	}
	if err := e.c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	job.Status.StartTime = &now
	if exit == 0 {
		job.Status.CompletionTime, job.Status.Succeeded = &now, 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now}}
	}
	if err := e.c.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
}
