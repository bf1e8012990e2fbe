package kubestore

import (
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// triggers are Trigger objects; only enabled changes in place (the CRD refuses changes to the rest).
func triggers(c client.Client) *crd[objects.TriggerSpec, apiv1.TriggerStatus, *slessv1.Trigger, *slessv1.TriggerList] {
	return &crd[objects.TriggerSpec, apiv1.TriggerStatus, *slessv1.Trigger, *slessv1.TriggerList]{c: c,
		object: func(ns, name string) *slessv1.Trigger {
			return &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		},
		list:     func() *slessv1.TriggerList { return &slessv1.TriggerList{} },
		items:    func(l *slessv1.TriggerList) []*slessv1.Trigger { return pointers(l.Items) },
		name:     func(s objects.TriggerSpec) string { return s.Name },
		toObject: toTrigger,
		setSpec: func(in objects.TriggerSpec, t *slessv1.Trigger) {
			t.Spec = slessv1.TriggerSpec{Type: in.Type, FunctionRef: in.FunctionRef, Schedule: in.Schedule, Enabled: in.Enabled,
				RabbitMQ: toRabbitMQ(in.RabbitMQ)}
		},
	}
}

// toRabbitMQ is the CRD's form of a rabbitmq block, FromRabbitMQ the wire's.
func toRabbitMQ(in *apiv1.RabbitMQTrigger) *slessv1.RabbitMQTrigger {
	if in == nil {
		return nil
	}
	out := &slessv1.RabbitMQTrigger{URLSecret: in.URLSecret, Queue: in.Queue, Passive: in.Passive, Prefetch: in.Prefetch,
		RetryBackoffMS: in.RetryBackoffMS, DeadLetter: in.DeadLetter}
	if in.MaxRetries != nil {
		out.MaxRetries = ptr.To(*in.MaxRetries)
	}
	return out
}

// FromRabbitMQ is the wire form of a Trigger's rabbitmq block (nil for none).
func FromRabbitMQ(in *slessv1.RabbitMQTrigger) *apiv1.RabbitMQTrigger {
	if in == nil {
		return nil
	}
	out := &apiv1.RabbitMQTrigger{URLSecret: in.URLSecret, Queue: in.Queue, Passive: in.Passive, Prefetch: in.Prefetch,
		RetryBackoffMS: in.RetryBackoffMS, DeadLetter: in.DeadLetter}
	if in.MaxRetries != nil {
		out.MaxRetries = ptr.To(*in.MaxRetries)
	}
	return out
}

func toTrigger(t *slessv1.Trigger) objects.Trigger {
	out := objects.Trigger{Spec: objects.TriggerSpec{Name: t.Name, Type: t.Spec.Type, FunctionRef: t.Spec.FunctionRef, Schedule: t.Spec.Schedule, Enabled: t.Spec.Enabled,
		RabbitMQ: FromRabbitMQ(t.Spec.RabbitMQ)},
		Status: apiv1.TriggerStatus{Active: t.Status.Active, URL: t.Status.URL, Connected: t.Status.Connected, LastError: t.Status.LastError,
			InFlight: t.Status.InFlight, DeliveredTotal: t.Status.DeliveredTotal, DeadLetteredTotal: t.Status.DeadLetteredTotal},
		Generation: t.Generation, ObservedGeneration: t.Status.ObservedGeneration}
	if t.Status.LastScheduleTime != nil {
		ts := t.Status.LastScheduleTime.Time
		out.Status.LastScheduleTime = &ts
	}
	return out
}

// jobs are FunctionJob objects; the API writes run_id and the event, the FunctionJob reconciler
// the status.
func jobs(c client.Client) *crd[objects.JobSpec, apiv1.JobStatus, *slessv1.FunctionJob, *slessv1.FunctionJobList] {
	return &crd[objects.JobSpec, apiv1.JobStatus, *slessv1.FunctionJob, *slessv1.FunctionJobList]{c: c,
		object: func(ns, name string) *slessv1.FunctionJob {
			return &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		},
		list:     func() *slessv1.FunctionJobList { return &slessv1.FunctionJobList{} },
		items:    func(l *slessv1.FunctionJobList) []*slessv1.FunctionJob { return pointers(l.Items) },
		name:     func(s objects.JobSpec) string { return s.Name },
		toObject: toJob,
		setSpec: func(in objects.JobSpec, j *slessv1.FunctionJob) {
			j.Spec = slessv1.FunctionJobSpec{FunctionRef: in.FunctionRef, EventJSON: in.EventJSON, RunID: in.RunID}
		},
	}
}

func toJob(j *slessv1.FunctionJob) objects.Job {
	return objects.Job{Spec: objects.JobSpec{Name: j.Name, FunctionRef: j.Spec.FunctionRef, EventJSON: j.Spec.EventJSON, RunID: j.Spec.RunID},
		Status: j.Status.Wire(), Generation: j.Generation, ObservedGeneration: j.Status.ObservedGeneration}
}
