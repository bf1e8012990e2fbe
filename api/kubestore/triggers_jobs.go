package kubestore

import (
	"context"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

type triggers struct{ c client.Client }

func toAPITrigger(t *slessv1.Trigger) apiv1.Trigger {
	out := apiv1.Trigger{Name: t.Name, Type: t.Spec.Type, FunctionRef: t.Spec.FunctionRef, Schedule: t.Spec.Schedule, Enabled: t.Spec.Enabled,
		Status: apiv1.TriggerStatus{Active: t.Status.Active, URL: t.Status.URL}}
	if t.Status.LastScheduleTime != nil {
		ts := t.Status.LastScheduleTime.Time
		out.Status.LastScheduleTime = &ts
	}
	return out
}

func (s *triggers) List(ctx context.Context, ns string) ([]apiv1.Trigger, error) {
	var l slessv1.TriggerList
	if err := s.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]apiv1.Trigger, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toAPITrigger(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *triggers) Get(ctx context.Context, ns, name string) (apiv1.Trigger, error) {
	var t slessv1.Trigger
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
		return apiv1.Trigger{}, notFound(err, ns, name)
	}
	return toAPITrigger(&t), nil
}

func (s *triggers) Create(ctx context.Context, ns string, in apiv1.Trigger) (apiv1.Trigger, error) {
	t := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns},
		Spec: slessv1.TriggerSpec{Type: in.Type, FunctionRef: in.FunctionRef, Schedule: in.Schedule, Enabled: in.Enabled}}
	if err := s.c.Create(ctx, t); err != nil {
		return apiv1.Trigger{}, notFound(err, ns, in.Name)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(t), t); err != nil {
			return err
		}
		t.Status.Active, t.Status.URL = in.Status.Active, in.Status.URL
		return s.c.Status().Update(ctx, t)
	})
	if err != nil {
		return apiv1.Trigger{}, err
	}
	return toAPITrigger(t), nil
}

// Update changes what the API may change on a trigger: enabled (spec) and its status view.
func (s *triggers) Update(ctx context.Context, ns, name string, fn func(*apiv1.Trigger) error) (apiv1.Trigger, error) {
	var out apiv1.Trigger
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var t slessv1.Trigger
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
			return notFound(err, ns, name)
		}
		cur := toAPITrigger(&t)
		if err := fn(&cur); err != nil {
			return err
		}
		t.Spec.Enabled = cur.Enabled
		status := t.Status
		status.Active = cur.Status.Active
		if err := s.c.Update(ctx, &t); err != nil {
			return err
		}
		t.Status = status
		if err := s.c.Status().Update(ctx, &t); err != nil {
			return err
		}
		out = toAPITrigger(&t)
		return nil
	})
	return out, err
}

func (s *triggers) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}), ns, name)
}

type jobs struct{ c client.Client }

func toAPIJob(j *slessv1.FunctionJob) apiv1.Job {
	out := apiv1.Job{Name: j.Name, FunctionRef: j.Spec.FunctionRef, EventJSON: j.Spec.EventJSON, RunID: j.Spec.RunID,
		Status: apiv1.JobStatus{Phase: j.Status.Phase, Message: j.Status.Message, LastRunID: j.Status.LastRunID}}
	if j.Status.StartTime != nil {
		ts := j.Status.StartTime.Time
		out.Status.StartTime = &ts
	}
	if j.Status.CompletionTime != nil {
		ts := j.Status.CompletionTime.Time
		out.Status.CompletionTime = &ts
	}
	return out
}

func (s *jobs) List(ctx context.Context, ns string) ([]apiv1.Job, error) {
	var l slessv1.FunctionJobList
	if err := s.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]apiv1.Job, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toAPIJob(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *jobs) Get(ctx context.Context, ns, name string) (apiv1.Job, error) {
	var j slessv1.FunctionJob
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
		return apiv1.Job{}, notFound(err, ns, name)
	}
	return toAPIJob(&j), nil
}

func (s *jobs) Create(ctx context.Context, ns string, in apiv1.Job) (apiv1.Job, error) {
	j := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns},
		Spec: slessv1.FunctionJobSpec{FunctionRef: in.FunctionRef, EventJSON: in.EventJSON, RunID: in.RunID}}
	if err := s.c.Create(ctx, j); err != nil {
		return apiv1.Job{}, notFound(err, ns, in.Name)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
			return err
		}
		if j.Status.Phase == "" {
			j.Status.Phase = in.Status.Phase
		}
		return s.c.Status().Update(ctx, j)
	})
	if err != nil {
		return apiv1.Job{}, err
	}
	return toAPIJob(j), nil
}

// Update applies fn like every Store: run_id and event go to the spec, what fn changed in the
// status (the API's Pending on a new run_id, a backend recording a result) to the status.
func (s *jobs) Update(ctx context.Context, ns, name string, fn func(*apiv1.Job) error) (apiv1.Job, error) {
	var out apiv1.Job
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var j slessv1.FunctionJob
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
			return notFound(err, ns, name)
		}
		before := toAPIJob(&j)
		cur := toAPIJob(&j)
		if err := fn(&cur); err != nil {
			return err
		}
		if cur.RunID != j.Spec.RunID || cur.EventJSON != j.Spec.EventJSON {
			j.Spec.RunID, j.Spec.EventJSON = cur.RunID, cur.EventJSON
			status := j.Status
			if err := s.c.Update(ctx, &j); err != nil {
				return err
			}
			j.Status = status
		}
		if !equalJobStatus(before.Status, cur.Status) {
			j.Status.Phase, j.Status.Message, j.Status.LastRunID = cur.Status.Phase, cur.Status.Message, cur.Status.LastRunID
			j.Status.StartTime, j.Status.CompletionTime = metaTime(cur.Status.StartTime), metaTime(cur.Status.CompletionTime)
			if err := s.c.Status().Update(ctx, &j); err != nil {
				return err
			}
		}
		out = toAPIJob(&j)
		return nil
	})
	return out, err
}

func equalJobStatus(a, b apiv1.JobStatus) bool {
	eq := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return a.Phase == b.Phase && a.Message == b.Message && a.LastRunID == b.LastRunID && eq(a.StartTime, b.StartTime) && eq(a.CompletionTime, b.CompletionTime)
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(*t)
	return &mt
}

func (s *jobs) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}), ns, name)
}
