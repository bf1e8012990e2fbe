package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
)

// Condition types of a Function: apiv1's (the reasons are apiv1.Reasons; package lifecycle sets
// them).
const (
	// FunctionBuilt: the image for the current code exists.
	FunctionBuilt = apiv1.ConditionBuilt
	// FunctionReady: the current image serves.
	FunctionReady = apiv1.ConditionReady
	// FunctionScaleLimited: the Deployment cannot get the pods it is scaled to (the tenant's
	// quota is used up; reason QuotaExceeded). Absent when nothing stops it.
	FunctionScaleLimited = apiv1.ConditionScaleLimited
)

// Lifecycle is the status as package lifecycle's state machine reads it.
func (s *FunctionStatus) Lifecycle() lifecycle.FunctionStatus {
	l := lifecycle.FunctionStatus{BuiltCodeSHA256: s.BuiltCodeSHA256, FailedBuildKey: s.FailedBuildKey, BuildingKey: s.BuildingKey}
	l.Phase, l.Image, l.URL, l.Message = s.Phase, s.Image, s.URL, s.Message
	l.Replicas, l.DesiredReplicas = int(s.Replicas), int(s.DesiredReplicas)
	if s.LastBuiltAt != nil {
		t := s.LastBuiltAt.Time.UTC()
		l.LastBuiltAt = &t
	}
	if b := s.Build; b != nil {
		l.BuildKey = b.Key
		l.Build = &apiv1.BuildInfo{DurationMS: b.DurationMS, DepsKey: b.DepsKey, DepsCached: b.DepsCached, DepsWarning: b.DepsWarning}
	}
	if r := s.BuildRetry; r != nil {
		l.Retry = &lifecycle.Retry{Key: r.Key, Attempts: int(r.Attempts)}
		if r.NotBefore != nil {
			l.Retry.NotBefore = r.NotBefore.Time.UTC()
		}
	}
	for _, c := range s.Conditions {
		l.Conditions = append(l.Conditions, apiv1.Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			LastTransitionTime: c.LastTransitionTime.UTC()})
	}
	l.ScaleLimited = l.IsScaleLimited()
	return l
}

// SetLifecycle writes l, a status package lifecycle made, into s; generation is the Function's
// (its conditions describe it).
func (s *FunctionStatus) SetLifecycle(l lifecycle.FunctionStatus, generation int64) {
	s.Phase, s.Image, s.URL, s.Message = l.Phase, l.Image, l.URL, l.Message
	s.BuiltCodeSHA256, s.FailedBuildKey, s.BuildingKey = l.BuiltCodeSHA256, l.FailedBuildKey, l.BuildingKey
	s.Replicas, s.DesiredReplicas = int32(l.Replicas), int32(l.DesiredReplicas)
	s.LastBuiltAt = nil
	if l.LastBuiltAt != nil {
		t := metav1.NewTime(*l.LastBuiltAt)
		s.LastBuiltAt = &t
	}
	s.Build = nil
	if l.Build != nil || l.BuildKey != "" {
		s.Build = &BuildStatus{Key: l.BuildKey}
		if b := l.Build; b != nil {
			s.Build.DurationMS, s.Build.DepsKey, s.Build.DepsCached, s.Build.DepsWarning = b.DurationMS, b.DepsKey, b.DepsCached, b.DepsWarning
		}
	}
	s.BuildRetry = nil
	if r := l.Retry; r != nil {
		s.BuildRetry = &BuildRetry{Key: r.Key, Attempts: int32(r.Attempts)}
		if !r.NotBefore.IsZero() {
			t := metav1.NewTime(r.NotBefore)
			s.BuildRetry.NotBefore = &t
		}
	}
	s.Conditions = nil
	for _, c := range l.Conditions {
		at := c.LastTransitionTime
		if at.IsZero() {
			at = time.Now()
		}
		s.Conditions = append(s.Conditions, metav1.Condition{Type: c.Type, Status: metav1.ConditionStatus(c.Status), Reason: c.Reason,
			Message: c.Message, LastTransitionTime: metav1.NewTime(at.UTC().Truncate(time.Second)), ObservedGeneration: generation})
	}
}

// Apply moves the Function's status through package lifecycle's state machine: the one way its
// controller changes phase, message and conditions.
func (f *Function) Apply(e lifecycle.Event, now time.Time) {
	f.Status.SetLifecycle(lifecycle.Next(f.Status.Lifecycle(), e, now), f.Generation)
}

// IsScaleLimited reports whether the Deployment cannot get the pods it is scaled to.
func (s *FunctionStatus) IsScaleLimited() bool { return s.Lifecycle().IsScaleLimited() }

// IsDisabled reports whether the function's http triggers switch it off.
func (s *FunctionStatus) IsDisabled() bool { return s.Lifecycle().IsDisabled() }
