package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// FunctionSpec is what the user asks for.
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicas) || !has(self.minReplicas) || self.maxReplicas >= self.minReplicas",message="maxReplicas must be at least minReplicas"
type FunctionSpec struct {
	// Runtime runs the code (provided: the code's own executable bootstrap).
	// +kubebuilder:validation:Enum=nodejs20;nodejs22;nodejs24;provided;python3.11;python3.13
	Runtime string `json:"runtime"`
	// Entrypoint is module.function (python) or file.export (node).
	// +kubebuilder:default="handler.handle"
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z_$][A-Za-z0-9_$]*$`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Entrypoint string `json:"entrypoint,omitempty"`
	// CodeSHA256 names the uploaded archive in the code store (code/{ns}/{name}/{sha256}.zip).
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{64})?$`
	// +optional
	CodeSHA256 string `json:"codeSHA256,omitempty"`
	// MemoryMB is the memory limit.
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=8192
	// +optional
	MemoryMB int32 `json:"memoryMB,omitempty"`
	// TimeoutSec bounds one invocation.
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=900
	// +optional
	TimeoutSec int32 `json:"timeoutSec,omitempty"`
	// Env is set in the function's container at run time (never baked into the image).
	// +kubebuilder:validation:MaxItems=128
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// SecretEnv are variables whose values come from the namespace's secrets (each a Secret
	// sless-secret-<secret>, labelled sless.dev/tenant-secret=true).
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=name
	// +optional
	SecretEnv []SecretEnvVar `json:"secretEnv,omitempty"`
	// SecretFiles mount each key of a secret as a read-only file in a directory under
	// /var/run/secrets/.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=path
	// +optional
	SecretFiles []SecretFiles `json:"secretFiles,omitempty"`
	// MinReplicas is the fewest instances kept (0: none when idle).
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the most instances started (unset: max(10, minReplicas)).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
	// Concurrency is how many requests one instance is sent at once, at most; more wait in the
	// proxy's hold queue.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Concurrency int32 `json:"concurrency,omitempty"`
	// IdleTimeoutSec is how long an instance above minReplicas may go without a request before it
	// is stopped.
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=86400
	// +optional
	IdleTimeoutSec int32 `json:"idleTimeoutSec,omitempty"`
	// Async lets /fn/ take asynchronous invocations of the function (X-Sless-Invocation-Type:
	// Event). Only the API reads it: a change restarts no pod.
	// +optional
	Async *AsyncConfig `json:"async,omitempty"`
}

// AsyncConfig is a function's asynchronous invocation (apiv1.AsyncConfig), defaults filled in by
// the API.
type AsyncConfig struct {
	Enabled bool `json:"enabled"`
	// MaxRetries after a failed attempt.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	MaxRetries *int32 `json:"maxRetries,omitempty"`
	// MaxAgeSec: older undelivered invocations are dead-lettered.
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=21600
	// +optional
	MaxAgeSec int32 `json:"maxAgeSec,omitempty"`
	// MaxQueued bounds the invocations not done.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxQueued int32 `json:"maxQueued,omitempty"`
}

// SecretEnvVar is one variable whose value is key Key of secret Secret.
type SecretEnvVar struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Secret string `json:"secret"`
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Key string `json:"key"`
}

// SecretFiles is the directory Path holding one read-only file per key of secret Secret.
type SecretFiles struct {
	// +kubebuilder:validation:Pattern=`^/var/run/secrets/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:MaxLength=256
	Path string `json:"path"`
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Secret string `json:"secret"`
}

// BuildStatus describes the build of the current image.
type BuildStatus struct {
	// Key is the build's identity (package build): the image is rebuilt when it changes.
	// +optional
	Key        string `json:"key,omitempty"`
	DurationMS int64  `json:"durationMS,omitempty"`
	DepsKey    string `json:"depsKey,omitempty"`
	DepsCached bool   `json:"depsCached,omitempty"`
	// DepsWarning says what the dependency install warned about (an unpinned install).
	// +optional
	DepsWarning string `json:"depsWarning,omitempty"`
}

// BuildRetry counts the platform's failures in a row of one build (package lifecycle's budget).
type BuildRetry struct {
	// Key is the build's key.
	Key string `json:"key"`
	// Attempts is how many times in a row the platform failed it.
	Attempts int32 `json:"attempts"`
	// NotBefore is when the next attempt is due.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
}

// FunctionStatus is what the operator made of it.
type FunctionStatus struct {
	// Phase is the seed's summary: Pending, Building, Ready or Failed.
	// +optional
	Phase apiv1.Phase `json:"phase,omitempty"`
	// Image is the function image by digest.
	// +optional
	Image string `json:"image,omitempty"`
	// BuiltCodeSHA256 is the code the image was built from.
	// +optional
	BuiltCodeSHA256 string `json:"builtCodeSHA256,omitempty"`
	// URL is the function's /fn/ URL.
	// +optional
	URL string `json:"url,omitempty"`
	// Message explains the phase (a build error, the last log lines of a failed start).
	// +optional
	Message string `json:"message,omitempty"`
	// LastBuiltAt is when the image was built.
	// +optional
	LastBuiltAt *metav1.Time `json:"lastBuiltAt,omitempty"`
	// Build describes the build of the current image.
	// +optional
	Build *BuildStatus `json:"build,omitempty"`
	// FailedBuildKey is the key of a build that failed through the function's own fault: it is not
	// retried until the key changes (new code, runtime or entrypoint).
	// +optional
	FailedBuildKey string `json:"failedBuildKey,omitempty"`
	// BuildingKey is the key of the build under way (started, waiting or retried).
	// +optional
	BuildingKey string `json:"buildingKey,omitempty"`
	// BuildRetry counts the platform's failures in a row of the current build: it is Building while
	// retried, Failed once the retry budget is spent (and still retried).
	// +optional
	BuildRetry *BuildRetry `json:"buildRetry,omitempty"`
	// Replicas are the instances ready now.
	Replicas int32 `json:"replicas"`
	// DesiredReplicas are the instances the platform is scaling to.
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Built, Ready, and ScaleLimited while the tenant's quota stops a scale-up.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Function is a user's function.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fn
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Function struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FunctionSpec   `json:"spec,omitempty"`
	Status FunctionStatus `json:"status,omitempty"`
}

// FunctionList is a list of Functions.
//
// +kubebuilder:object:root=true
type FunctionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Function `json:"items"`
}

func init() { SchemeBuilder.Register(&Function{}, &FunctionList{}) }
