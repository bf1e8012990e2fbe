package kubestore

import (
	"context"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

type triggers struct{ c client.Client }

func toTrigger(t *slessv1.Trigger) objects.Trigger {
	out := objects.Trigger{Spec: objects.TriggerSpec{Name: t.Name, Type: t.Spec.Type, FunctionRef: t.Spec.FunctionRef, Schedule: t.Spec.Schedule, Enabled: t.Spec.Enabled},
		Status:     apiv1.TriggerStatus{Active: t.Status.Active, URL: t.Status.URL},
		Generation: t.Generation, ObservedGeneration: t.Status.ObservedGeneration}
	if t.Status.LastScheduleTime != nil {
		ts := t.Status.LastScheduleTime.Time
		out.Status.LastScheduleTime = &ts
	}
	return out
}

func (s *triggers) List(ctx context.Context, ns string) ([]objects.Trigger, error) {
	var l slessv1.TriggerList
	if err := s.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]objects.Trigger, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toTrigger(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

func (s *triggers) Get(ctx context.Context, ns, name string) (objects.Trigger, error) {
	var t slessv1.Trigger
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
		return objects.Trigger{}, notFound(err, ns, name)
	}
	return toTrigger(&t), nil
}

func (s *triggers) Create(ctx context.Context, ns string, in objects.TriggerSpec) (objects.Trigger, error) {
	t := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns},
		Spec: slessv1.TriggerSpec{Type: in.Type, FunctionRef: in.FunctionRef, Schedule: in.Schedule, Enabled: in.Enabled}}
	if err := s.c.Create(ctx, t); err != nil {
		return objects.Trigger{}, notFound(err, ns, in.Name)
	}
	return toTrigger(t), nil
}

// Update writes what may change on a trigger's spec: enabled (the CRD refuses changes to the rest).
func (s *triggers) Update(ctx context.Context, ns, name string, fn func(*objects.TriggerSpec) error) (objects.Trigger, error) {
	var out objects.Trigger
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var t slessv1.Trigger
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
			return notFound(err, ns, name)
		}
		spec := toTrigger(&t).Spec
		if err := fn(&spec); err != nil {
			return err
		}
		if (spec.Enabled == nil) != (t.Spec.Enabled == nil) || (spec.Enabled != nil && *spec.Enabled != *t.Spec.Enabled) {
			t.Spec.Enabled = spec.Enabled
			if err := s.c.Update(ctx, &t); err != nil {
				return err
			}
		}
		out = toTrigger(&t)
		return nil
	})
	return out, err
}

func (s *triggers) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}), ns, name)
}

type jobs struct{ c client.Client }

func toJob(j *slessv1.FunctionJob) objects.Job {
	return objects.Job{Spec: objects.JobSpec{Name: j.Name, FunctionRef: j.Spec.FunctionRef, EventJSON: j.Spec.EventJSON, RunID: j.Spec.RunID},
		Status: j.Status.Wire(), Generation: j.Generation, ObservedGeneration: j.Status.ObservedGeneration}
}

func (s *jobs) List(ctx context.Context, ns string) ([]objects.Job, error) {
	var l slessv1.FunctionJobList
	if err := s.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]objects.Job, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toJob(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

func (s *jobs) Get(ctx context.Context, ns, name string) (objects.Job, error) {
	var j slessv1.FunctionJob
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
		return objects.Job{}, notFound(err, ns, name)
	}
	return toJob(&j), nil
}

func (s *jobs) Create(ctx context.Context, ns string, in objects.JobSpec) (objects.Job, error) {
	j := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns},
		Spec: slessv1.FunctionJobSpec{FunctionRef: in.FunctionRef, EventJSON: in.EventJSON, RunID: in.RunID}}
	if err := s.c.Create(ctx, j); err != nil {
		return objects.Job{}, notFound(err, ns, in.Name)
	}
	return toJob(j), nil
}

// Update writes run_id and the event (the spec); the FunctionJob reconciler writes the status.
func (s *jobs) Update(ctx context.Context, ns, name string, fn func(*objects.JobSpec) error) (objects.Job, error) {
	var out objects.Job
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var j slessv1.FunctionJob
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
			return notFound(err, ns, name)
		}
		spec := toJob(&j).Spec
		if err := fn(&spec); err != nil {
			return err
		}
		if spec.RunID != j.Spec.RunID || spec.EventJSON != j.Spec.EventJSON {
			j.Spec.RunID, j.Spec.EventJSON = spec.RunID, spec.EventJSON
			if err := s.c.Update(ctx, &j); err != nil {
				return err
			}
		}
		out = toJob(&j)
		return nil
	})
	return out, err
}

func (s *jobs) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}), ns, name)
}
