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
	TriggerHTTP     TriggerType = "http"
	TriggerCron     TriggerType = "cron"
	TriggerRabbitMQ TriggerType = "rabbitmq"
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
	MinReplicas    int `json:"min_replicas"`
	MaxReplicas    int `json:"max_replicas,omitempty"`
	Concurrency    int `json:"concurrency,omitempty"`
	IdleTimeoutSec int `json:"idle_timeout_sec,omitempty"`
	// Async, when enabled, lets /fn/ take requests with X-Sless-Invocation-Type: Event (answers
	// show the defaults in force).
	Async  *AsyncConfig   `json:"async,omitempty"`
	Status FunctionStatus `json:"status"`
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

// Trigger makes a function reachable over HTTP (type "http"), runs it on a schedule ("cron") or
// with every message of a RabbitMQ queue ("rabbitmq"). Only Enabled changes in place; the other
// fields are fixed once created.
type Trigger struct {
	Name        string           `json:"name"`
	Type        TriggerType      `json:"type"`
	FunctionRef string           `json:"function_ref"`
	Schedule    string           `json:"schedule,omitempty"`
	RabbitMQ    *RabbitMQTrigger `json:"rabbitmq,omitempty"`
	Enabled     *bool            `json:"enabled,omitempty"` // omitted on create means true
	Status      TriggerStatus    `json:"status"`
}

// RabbitMQTrigger is a rabbitmq trigger's queue and delivery rule. Answers show the defaults in
// force.
type RabbitMQTrigger struct {
	// URLSecret names the namespace secret key ("SECRET/KEY") holding the broker's amqp:// or
	// amqps:// URL with its credentials: never inline.
	URLSecret string `json:"url_secret"`
	// Queue is declared durable unless Passive (then it must exist).
	Queue   string `json:"queue"`
	Passive bool   `json:"passive,omitempty"`
	// Prefetch bounds the messages in flight (1 keeps them in order); default 10.
	Prefetch int `json:"prefetch,omitempty"`
	// MaxRetries: a message the function fails on (5xx, timeout, lost instance) is tried again up
	// to this many times, RetryBackoffMS apart and doubling, then dead-lettered; default 5.
	MaxRetries     *int `json:"max_retries,omitempty"`
	RetryBackoffMS int  `json:"retry_backoff_ms,omitempty"`
	// DeadLetter is the queue failed messages go to (always declared); default Queue + ".dlq".
	DeadLetter string `json:"dead_letter,omitempty"`
}

// Defaults and bounds of a rabbitmq trigger.
const (
	DefaultPrefetch       = 10
	MaxPrefetch           = 1000
	DefaultMaxRetries     = 5
	MaxMaxRetries         = 100
	DefaultRetryBackoffMS = 1000
	MaxRetryBackoffMS     = 3_600_000
	DeadLetterSuffix      = ".dlq"
)

// IsEnabled reads Enabled with its default (true).
func (t Trigger) IsEnabled() bool { return t.Enabled == nil || *t.Enabled }

// TriggerStatus is set by the platform.
type TriggerStatus struct {
	Active           bool       `json:"active"`
	URL              string     `json:"url,omitempty"`
	LastScheduleTime *time.Time `json:"last_schedule_time,omitempty"`
	// A rabbitmq trigger's consumer: connected to its broker and consuming, why not or the last
	// failed delivery, messages in flight, acknowledged after a 2xx and dead-lettered since the
	// consumer started.
	Connected         bool   `json:"connected,omitempty"`
	LastError         string `json:"last_error,omitempty"`
	InFlight          int    `json:"in_flight,omitempty"`
	DeliveredTotal    int64  `json:"delivered_total,omitempty"`
	DeadLetteredTotal int64  `json:"dead_lettered_total,omitempty"`
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
	// Source is what called: "" for /fn/ over HTTP, "rabbitmq" for a trigger's message
	// (MessageID is then the message's id).
	Source    string `json:"source,omitempty"`
	MessageID string `json:"message_id,omitempty"`
}

// Namespace answers POST /v1/namespaces/{ns}/ensure.
type Namespace struct {
	Name string `json:"name"`
}

// List is every list response: {"items":[…]}.
type List[T any] struct {
	Items []T `json:"items"`
}
