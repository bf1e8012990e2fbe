package controllers

import (
	"context"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

// TriggerReconciler gives http triggers their URL and runs cron triggers as CronJobs. Replicas are
// the Function reconciler's alone (it watches Triggers), so two controllers never fight over them.
type TriggerReconciler struct {
	client.Client
	Scheme    *runtime.Scheme
	PublicURL string
}

// +kubebuilder:rbac:groups=sless.dev,resources=triggers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=triggers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete

// Reconcile sets the URL (http) or the CronJob (cron).
func (r *TriggerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tr slessv1.Trigger
	if err := r.Get(ctx, req.NamespacedName, &tr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := tr.Status.DeepCopy()
	enabled := tr.Spec.Enabled == nil || *tr.Spec.Enabled
	tr.Status.ObservedGeneration = tr.Generation
	tr.Status.Active = enabled
	var result ctrl.Result
	if tr.Spec.Type == "http" {
		tr.Status.URL = strings.TrimRight(r.PublicURL, "/") + "/fn/" + tr.Namespace + "/" + tr.Spec.FunctionRef
	} else {
		var fn slessv1.Function
		err := r.Get(ctx, client.ObjectKey{Namespace: tr.Namespace, Name: tr.Spec.FunctionRef}, &fn)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && fn.Status.Image == ""):
			tr.Status.Active = false
			result = ctrl.Result{RequeueAfter: 5 * time.Second}
		case err != nil:
			return ctrl.Result{}, err
		default:
			want := resources.MakeCronJob(&tr, &fn, fn.Status.Image)
			live := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
			if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, live, func() error {
				live.Labels = want.Labels
				live.Spec.Schedule, live.Spec.ConcurrencyPolicy, live.Spec.StartingDeadlineSeconds = want.Spec.Schedule, want.Spec.ConcurrencyPolicy, want.Spec.StartingDeadlineSeconds
				live.Spec.Suspend, live.Spec.SuccessfulJobsHistoryLimit, live.Spec.FailedJobsHistoryLimit = want.Spec.Suspend, want.Spec.SuccessfulJobsHistoryLimit, want.Spec.FailedJobsHistoryLimit
				if !equality.Semantic.DeepDerivative(want.Spec.JobTemplate, live.Spec.JobTemplate) {
					live.Spec.JobTemplate = want.Spec.JobTemplate
				}
				return controllerutil.SetControllerReference(&tr, live, r.Scheme)
			}); err != nil {
				return ctrl.Result{}, err
			}
			tr.Status.LastScheduleTime = live.Status.LastScheduleTime
		}
	}
	if !equality.Semantic.DeepEqual(&tr.Status, before) {
		if err := r.Status().Update(ctx, &tr); err != nil {
			return ctrl.Result{}, err
		}
	}
	return result, nil
}

// SetupWithManager watches Triggers and their CronJobs.
func (r *TriggerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&slessv1.Trigger{}).Owns(&batchv1.CronJob{}).Complete(r)
}
