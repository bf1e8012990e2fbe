package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// FunctionJobSpec runs a function once: RunID 0 never runs; a RunID above status.lastRunID runs again.
type FunctionJobSpec struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="functionRef is immutable"
	FunctionRef string `json:"functionRef"`
	// EventJSON is the event, as JSON text.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	EventJSON string `json:"eventJSON,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	RunID int64 `json:"runID,omitempty"`
}

// FunctionJobStatus is the last run.
type FunctionJobStatus struct {
	// Phase: Pending, Skipped, Running, Succeeded or Failed.
	Phase          apiv1.JobPhase `json:"phase,omitempty"`
	JobName        string         `json:"jobName,omitempty"`
	LastRunID      int64          `json:"lastRunID,omitempty"`
	StartTime      *metav1.Time   `json:"startTime,omitempty"`
	CompletionTime *metav1.Time   `json:"completionTime,omitempty"`
	// Message is the run's result (the handler's JSON, from the pod's termination message) or error.
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FunctionJob is a one-shot run of a Function.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef`
// +kubebuilder:printcolumn:name="Run",type=integer,JSONPath=`.spec.runID`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FunctionJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionJobSpec   `json:"spec,omitempty"`
	Status FunctionJobStatus `json:"status,omitempty"`
}

// FunctionJobList is a list of FunctionJobs.
//
// +kubebuilder:object:root=true
type FunctionJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FunctionJob `json:"items"`
}

func init() { SchemeBuilder.Register(&FunctionJob{}, &FunctionJobList{}) }

// Wire is the run's status as users see it.
func (s *FunctionJobStatus) Wire() apiv1.JobStatus {
	out := apiv1.JobStatus{Phase: s.Phase, Message: s.Message, LastRunID: s.LastRunID}
	if s.StartTime != nil {
		t := s.StartTime.Time.UTC()
		out.StartTime = &t
	}
	if s.CompletionTime != nil {
		t := s.CompletionTime.Time.UTC()
		out.CompletionTime = &t
	}
	return out
}

// SetWire writes a run's status, as package lifecycle made it, into s.
func (s *FunctionJobStatus) SetWire(w apiv1.JobStatus) {
	s.Phase, s.Message, s.LastRunID = w.Phase, w.Message, w.LastRunID
	s.StartTime, s.CompletionTime = nil, nil
	if w.StartTime != nil {
		t := metav1.NewTime(*w.StartTime)
		s.StartTime = &t
	}
	if w.CompletionTime != nil {
		t := metav1.NewTime(*w.CompletionTime)
		s.CompletionTime = &t
	}
}
