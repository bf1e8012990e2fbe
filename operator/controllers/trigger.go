package controllers

import (
	"context"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// TriggerReconciler gives http triggers their URL and runs cron triggers as CronJobs (rabbitmq
// triggers run in their namespace's consumer: ConsumerReconciler). Replicas are
// the Function reconciler's alone (it watches Triggers), so two controllers never fight over them.
type TriggerReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// PolicyGate: as FunctionReconciler's.
	PolicyGate string
	PublicURL  string
	// Recorder, when set, records when a cron trigger's CronJob is created or moves to a new image.
	Recorder record.EventRecorder
}

// +kubebuilder:rbac:groups=sless.dev,resources=triggers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=triggers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=sless.dev,resources=functions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile sets the URL (http) or the CronJob (cron).
func (r *TriggerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tr slessv1.Trigger
	if err := r.Get(ctx, req.NamespacedName, &tr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := tr.Status.DeepCopy()
	wire := apiv1.Trigger{Name: tr.Name, Type: tr.Spec.Type, FunctionRef: tr.Spec.FunctionRef, Schedule: tr.Spec.Schedule, Enabled: tr.Spec.Enabled}
	tr.Status.ObservedGeneration = tr.Generation
	tr.Status.Active = lifecycle.TriggerActive(wire, true)
	switch tr.Spec.Type {
	case apiv1.TriggerHTTP:
		tr.Status.URL = runspec.FunctionURL(r.PublicURL, tr.Namespace, tr.Spec.FunctionRef)
	case apiv1.TriggerRabbitMQ:
		// The namespace's consumer (ConsumerReconciler) runs it and writes the rest of its status.
	default:
		var fn slessv1.Function
		err := r.Get(ctx, client.ObjectKey{Namespace: tr.Namespace, Name: tr.Spec.FunctionRef}, &fn)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && fn.Status.Image == ""):
			tr.Status.Active = lifecycle.TriggerActive(wire, false) // the Function's build wakes this trigger (triggersOf)
		case err != nil:
			return ctrl.Result{}, err
		default:
			want := resources.MakeCronJob(&tr, &fn, fn.Status.Image)
			resources.PolicyGate(&want.Spec.JobTemplate.Spec.Template.Spec, r.PolicyGate)
			live := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: want.Namespace}}
			op, err := controllerutil.CreateOrUpdate(ctx, r.Client, live, func() error {
				live.Labels = want.Labels
				live.Spec.Schedule, live.Spec.ConcurrencyPolicy, live.Spec.StartingDeadlineSeconds = want.Spec.Schedule, want.Spec.ConcurrencyPolicy, want.Spec.StartingDeadlineSeconds
				live.Spec.Suspend, live.Spec.SuccessfulJobsHistoryLimit, live.Spec.FailedJobsHistoryLimit = want.Spec.Suspend, want.Spec.SuccessfulJobsHistoryLimit, want.Spec.FailedJobsHistoryLimit
				if !equality.Semantic.DeepDerivative(want.Spec.JobTemplate, live.Spec.JobTemplate) {
					live.Spec.JobTemplate = want.Spec.JobTemplate
				}
				return controllerutil.SetControllerReference(&tr, live, r.Scheme)
			})
			if err != nil {
				return ctrl.Result{}, err
			}
			if op != controllerutil.OperationResultNone {
				emit(r.Recorder, &tr, corev1.EventTypeNormal, "CronJob"+strings.ToUpper(string(op[:1]))+string(op[1:]),
					"CronJob %s (%s) runs %s", live.Name, tr.Spec.Schedule, fn.Status.Image)
			}
			tr.Status.LastScheduleTime = live.Status.LastScheduleTime
		}
	}
	if !equality.Semantic.DeepEqual(&tr.Status, before) {
		if err := r.Status().Update(ctx, &tr); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager watches Triggers, their CronJobs, and Functions: a new image moves the cron
// triggers of that function to it.
func (r *TriggerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&slessv1.Trigger{}).Owns(&batchv1.CronJob{}).
		Watches(&slessv1.Function{}, handler.EnqueueRequestsFromMapFunc(r.triggersOf)).
		Complete(r)
}

func (r *TriggerReconciler) triggersOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var ts slessv1.TriggerList
	if err := r.List(ctx, &ts, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, t := range ts.Items {
		if t.Spec.FunctionRef == obj.GetName() && t.Spec.Type == apiv1.TriggerCron {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return out
}
