package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/sless-dev/sless/api/apiv1"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sless-dev/sless/lifecycle"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

// FunctionJobReconciler runs a FunctionJob as a Kubernetes Job of the function's image in job mode
// and reads the result from the pod's termination message.
type FunctionJobReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// PolicyGate: as FunctionReconciler's.
	PolicyGate string
	// APIReader reads the finished Job's pod, whose status the cache may not have yet; nil reads
	// through Client.
	APIReader client.Reader
	// Recorder, when set, records each run's start and outcome as Events on the FunctionJob.
	Recorder record.EventRecorder
}

func (r *FunctionJobReconciler) event(fj *slessv1.FunctionJob, typ, reason, format string, args ...any) {
	emit(r.Recorder, fj, typ, reason, format, args...)
}

// +kubebuilder:rbac:groups=sless.dev,resources=functionjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=functionjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile follows the seed's run_id rule: 0 never runs, a higher run_id runs again.
func (r *FunctionJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fj slessv1.FunctionJob
	if err := r.Get(ctx, req.NamespacedName, &fj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := fj.Status.DeepCopy()
	fj.Status.ObservedGeneration = fj.Generation
	apply := func(e lifecycle.JobEvent) { fj.Status.SetWire(lifecycle.NextJob(fj.Status.Wire(), e, time.Now())) }
	write := func() error {
		if equality.Semantic.DeepEqual(&fj.Status, before) {
			return nil
		}
		return r.Status().Update(ctx, &fj)
	}
	switch lifecycle.NextRun(fj.Spec.RunID, fj.Status.Wire()) {
	case lifecycle.JobSkip:
		apply(lifecycle.RunSkipped{})
		return ctrl.Result{}, write()
	case lifecycle.JobRun:
		var fn slessv1.Function
		err := r.Get(ctx, client.ObjectKey{Namespace: fj.Namespace, Name: fj.Spec.FunctionRef}, &fn)
		if apierrors.IsNotFound(err) || (err == nil && fn.Status.Image == "") {
			apply(lifecycle.RunWaiting{Message: fmt.Sprintf("waiting for function %q to be built", fj.Spec.FunctionRef)})
			return ctrl.Result{RequeueAfter: 2 * time.Second}, write()
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		if refs := resources.FunctionSecrets(&fn); len(refs.Names()) > 0 {
			// A Job whose secret is missing would wait in CreateContainerConfigError until its
			// deadline: this run is over at once, naming what is missing.
			var ns corev1.Namespace
			if err := r.Get(ctx, client.ObjectKey{Name: fj.Namespace}, &ns); err != nil {
				return ctrl.Result{}, err
			}
			if _, msg := resources.SecretState(&fn, &ns); msg != "" {
				apply(lifecycle.RunRefused{RunID: fj.Spec.RunID, Message: "not started: " + msg})
				return ctrl.Result{}, write()
			}
		}
		job := resources.MakeJob(&fj, &fn, fn.Status.Image)
		resources.PolicyGate(&job.Spec.Template.Spec, r.PolicyGate)
		if err := controllerutil.SetControllerReference(&fj, job, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, job); err == nil {
			r.event(&fj, corev1.EventTypeNormal, "Started", "run_id %d started as Job %s", fj.Spec.RunID, job.Name)
		} else if !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, err
		}
		apply(lifecycle.RunStarted{RunID: fj.Spec.RunID})
		fj.Status.JobName = job.Name
		return ctrl.Result{}, write()
	}
	if fj.Status.Phase != apiv1.JobRunning {
		return ctrl.Result{}, write()
	}
	var job batchv1.Job
	if err := r.Get(ctx, client.ObjectKey{Namespace: fj.Namespace, Name: fj.Status.JobName}, &job); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	done, ok := finished(&job)
	if !done {
		return ctrl.Result{}, nil // the Job's status change brings us back (Owns)
	}
	msg, err := podTerminationMessage(ctx, uncached(r.APIReader, r.Client), &job)
	if err != nil {
		return ctrl.Result{}, err
	}
	apply(lifecycle.RunFinished{RunID: fj.Status.LastRunID, OK: ok, Message: msg})
	if err := write(); err != nil {
		return ctrl.Result{}, err
	}
	if ok {
		r.event(&fj, corev1.EventTypeNormal, "Succeeded", "run_id %d: %s", fj.Status.LastRunID, msg)
	} else {
		r.event(&fj, corev1.EventTypeWarning, "Failed", "run_id %d: %s", fj.Status.LastRunID, msg)
	}
	return ctrl.Result{}, nil
}

func finished(job *batchv1.Job) (done, ok bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return true, false
		}
	}
	return false, false
}

// SetupWithManager watches FunctionJobs and their Jobs.
func (r *FunctionJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&slessv1.FunctionJob{}).Owns(&batchv1.Job{}).Complete(r)
}
