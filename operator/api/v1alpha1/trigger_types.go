package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// TriggerSpec: an http trigger exposes the function; a cron trigger runs it on a schedule; a
// rabbitmq trigger calls it with every message of a queue (the namespace's consumer Deployment).
// Only Enabled changes after creation.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'cron' || has(self.schedule)",message="a cron trigger needs a schedule"
// +kubebuilder:validation:XValidation:rule="self.type == 'cron' || !has(self.schedule)",message="only a cron trigger has a schedule (an http or rabbitmq trigger has no schedule)"
// +kubebuilder:validation:XValidation:rule="(self.type == 'rabbitmq') == has(self.rabbitmq)",message="a rabbitmq trigger, and only one, has a rabbitmq block"
type TriggerSpec struct {
	// +kubebuilder:validation:Enum=http;cron;rabbitmq
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
	// RabbitMQ is a rabbitmq trigger's queue and delivery rule (apiv1.RabbitMQTrigger, defaults
	// filled in by the API).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="rabbitmq is immutable"
	// +optional
	RabbitMQ *RabbitMQTrigger `json:"rabbitmq,omitempty"`
	// Enabled: false stops the function when none of its http triggers is enabled.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// RabbitMQTrigger mirrors apiv1.RabbitMQTrigger (whose rules the API checks before storing).
type RabbitMQTrigger struct {
	// URLSecret is "SECRET/KEY": the namespace secret key holding the broker's URL.
	// +kubebuilder:validation:MinLength=3
	URLSecret string `json:"urlSecret"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Queue string `json:"queue"`
	// +optional
	Passive bool `json:"passive,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Prefetch int `json:"prefetch,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxRetries *int `json:"maxRetries,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600000
	// +optional
	RetryBackoffMS int `json:"retryBackoffMS,omitempty"`
	// +kubebuilder:validation:MaxLength=255
	// +optional
	DeadLetter string `json:"deadLetter,omitempty"`
}

// TriggerStatus is what the operator made of it. A rabbitmq trigger's consumer fields (Connected
// to InFlight) are written by the namespace's consumer, the rest by the Trigger reconciler.
type TriggerStatus struct {
	Active           bool         `json:"active,omitempty"`
	URL              string       `json:"url,omitempty"`
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// Connected: the consumer is connected to the broker and consuming.
	Connected bool `json:"connected,omitempty"`
	// LastError is why it does not consume, or the last failed delivery.
	LastError string `json:"lastError,omitempty"`
	InFlight  int    `json:"inFlight,omitempty"`
	// DeliveredTotal and DeadLetteredTotal count messages acknowledged after a 2xx and
	// dead-lettered, continued across the consumer's restarts.
	DeliveredTotal     int64 `json:"deliveredTotal,omitempty"`
	DeadLetteredTotal  int64 `json:"deadLetteredTotal,omitempty"`
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Trigger makes a Function reachable over HTTP, runs it on a schedule or with a queue's messages.
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
