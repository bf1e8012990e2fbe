package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// TriggerSpec: an http trigger exposes the function; a cron trigger runs it on a schedule. Only
// Enabled changes after creation.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'cron' || has(self.schedule)",message="a cron trigger needs a schedule"
// +kubebuilder:validation:XValidation:rule="self.type != 'http' || !has(self.schedule)",message="an http trigger has no schedule"
type TriggerSpec struct {
	// +kubebuilder:validation:Enum=http;cron
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type is immutable"
	Type apiv1.TriggerType `json:"type"`
	// FunctionRef names a Function in the same namespace.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="functionRef is immutable"
	FunctionRef string `json:"functionRef"`
	// Schedule is a 5-field cron expression (cron triggers).
	// +kubebuilder:validation:Pattern=`^(\S+\s+){4}\S+$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="schedule is immutable"
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// Enabled: false stops the function when none of its http triggers is enabled.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// TriggerStatus is what the operator made of it.
type TriggerStatus struct {
	Active             bool         `json:"active,omitempty"`
	URL                string       `json:"url,omitempty"`
	LastScheduleTime   *metav1.Time `json:"lastScheduleTime,omitempty"`
	ObservedGeneration int64        `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Trigger makes a Function reachable over HTTP or runs it on a schedule.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Function",type=string,JSONPath=`.spec.functionRef`
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.enabled`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Trigger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TriggerSpec   `json:"spec,omitempty"`
	Status TriggerStatus `json:"status,omitempty"`
}

// TriggerList is a list of Triggers.
//
// +kubebuilder:object:root=true
type TriggerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Trigger `json:"items"`
}

func init() { SchemeBuilder.Register(&Trigger{}, &TriggerList{}) }
