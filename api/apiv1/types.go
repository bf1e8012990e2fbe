package apiv1

import "time"

// Phase summarizes a function's state (the seed's phases).
type Phase string

// Function phases.
const (
	PhasePending  Phase = "Pending"
	PhaseBuilding Phase = "Building"
	PhaseReady    Phase = "Ready"
	PhaseFailed   Phase = "Failed"
)

// JobPhase summarizes a job's last run.
type JobPhase string

// Job phases.
const (
	JobPending   JobPhase = "Pending"
	JobSkipped   JobPhase = "Skipped"
	JobRunning   JobPhase = "Running"
	JobSucceeded JobPhase = "Succeeded"
	JobFailed    JobPhase = "Failed"
)

// TriggerType says how a trigger calls its function.
type TriggerType string

// Trigger types.
const (
	TriggerHTTP TriggerType = "http"
	TriggerCron TriggerType = "cron"
)

// Function is a user's function: its spec and what the platform made of it.
type Function struct {
	Name       string            `json:"name"`
	Runtime    string            `json:"runtime"`
	Entrypoint string            `json:"entrypoint,omitempty"`
	MemoryMB   int               `json:"memory_mb,omitempty"`
	TimeoutSec int               `json:"timeout_sec,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	// SecretEnv names variables whose values come from the namespace's secrets ("SECRET/KEY");
	// SecretFiles mounts a secret's keys as read-only files in a directory under
	// /var/run/secrets/ (path → secret). Neither is part of the image: a new value of a secret
	// restarts the functions that use it, without a build.
	SecretEnv   map[string]string `json:"secret_env,omitempty"`
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	// Scale, changed in place without a rebuild (0 on a request means the default; answers show
	// the values in force).
	MinReplicas    int            `json:"min_replicas"`
	MaxReplicas    int            `json:"max_replicas,omitempty"`
	Concurrency    int            `json:"concurrency,omitempty"`
	IdleTimeoutSec int            `json:"idle_timeout_sec,omitempty"`
	Status         FunctionStatus `json:"status"`
}

// FunctionStatus is set by the platform.
type FunctionStatus struct {
	Phase       Phase      `json:"phase,omitempty"`
	Image       string     `json:"image,omitempty"` // "<repo>@sha256:…"
	CodeSHA256  string     `json:"code_sha256,omitempty"`
	Message     string     `json:"message,omitempty"`
	URL         string     `json:"url,omitempty"`
	LastBuiltAt *time.Time `json:"last_built_at,omitempty"`
	Build       *BuildInfo `json:"build,omitempty"`
	// Replicas are the instances ready now, DesiredReplicas those the platform is scaling to;
	// both always present (0 at zero).
	Replicas        int `json:"replicas"`
	DesiredReplicas int `json:"desired_replicas"`
	// ScaleLimited: the platform cannot start the instances it is scaling to (the tenant's quota
	// is used up; Message names it). /fn/ then does not hold a request no instance can take.
	ScaleLimited bool `json:"scale_limited,omitempty"`
	// Conditions are the stages the current code went through: Built and Ready, each with the
	// stage's reason and message (the events say when each stage began: GET …/events).
	Conditions []Condition `json:"conditions,omitempty"`
}

// BuildInfo describes the last build.
type BuildInfo struct {
	DurationMS  int64  `json:"duration_ms"`
	DepsKey     string `json:"deps_key,omitempty"`
	DepsCached  bool   `json:"deps_cached"`
	DepsWarning string `json:"deps_warning,omitempty"`
}

// Trigger makes a function reachable over HTTP (type "http") or runs it on a schedule ("cron").
// Only Enabled changes in place; the other fields are fixed once created.
type Trigger struct {
	Name        string        `json:"name"`
	Type        TriggerType   `json:"type"`
	FunctionRef string        `json:"function_ref"`
	Schedule    string        `json:"schedule,omitempty"`
	Enabled     *bool         `json:"enabled,omitempty"` // omitted on create means true
	Status      TriggerStatus `json:"status"`
}

// IsEnabled reads Enabled with its default (true).
func (t Trigger) IsEnabled() bool { return t.Enabled == nil || *t.Enabled }

// TriggerStatus is set by the platform.
type TriggerStatus struct {
	Active           bool       `json:"active"`
	URL              string     `json:"url,omitempty"`
	LastScheduleTime *time.Time `json:"last_schedule_time,omitempty"`
}

// TriggerPatch is the body of PATCH …/triggers/{name}.
type TriggerPatch struct {
	Enabled *bool `json:"enabled"`
}

// Job runs a function once with an event. A run_id above status.last_run_id runs it again.
type Job struct {
	Name        string    `json:"name"`
	FunctionRef string    `json:"function_ref"`
	EventJSON   string    `json:"event_json,omitempty"` // JSON text, as a string
	RunID       int64     `json:"run_id"`
	Status      JobStatus `json:"status"`
}

// JobStatus is set by the platform.
type JobStatus struct {
	Phase          JobPhase   `json:"phase,omitempty"`
	Message        string     `json:"message,omitempty"`
	LastRunID      int64      `json:"last_run_id"`
	StartTime      *time.Time `json:"start_time,omitempty"`
	CompletionTime *time.Time `json:"completion_time,omitempty"`
}

// UploadResponse answers POST …/functions/{name}/upload (202).
type UploadResponse struct {
	CodeSHA256 string `json:"code_sha256"`
	Phase      Phase  `json:"phase"`
}

// Invocation is one call through /fn/, newest first in lists.
type Invocation struct {
	Time       time.Time `json:"time"`
	Status     int       `json:"status"`
	DurationMS float64   `json:"duration_ms"`
	RequestID  string    `json:"request_id,omitempty"`
}

// Namespace answers POST /v1/namespaces/{ns}/ensure.
type Namespace struct {
	Name string `json:"name"`
}

// List is every list response: {"items":[…]}.
type List[T any] struct {
	Items []T `json:"items"`
}
