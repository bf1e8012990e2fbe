package objects

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/lifecycle"
)

// Errors the stores return (wrapped is fine); the API maps them to its error codes.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrConflict      = errors.New("conflict")
	// ErrQuotaExceeded: a create would take a namespace beyond its quota (wrapped, with a message
	// naming the quota); the API answers 403 quota_exceeded.
	ErrQuotaExceeded = errors.New("quota exceeded")
)

// NotReadyError says a function cannot take requests now, and why.
type NotReadyError struct{ Reason string }

func (e *NotReadyError) Error() string { return "not ready: " + e.Reason }

// Object is one stored object as the API sees it (knative's split): the spec the API writes and
// the status the backend's controller alone writes. Generation counts changes of the spec;
// ObservedGeneration is the generation the status describes, so a status older than the spec shows
// as Pending without anyone writing "Pending".
type Object[S, St any] struct {
	Spec               S
	Status             St
	Generation         int64
	ObservedGeneration int64
	// Deleting is set once a deletion has started that the backend still finishes (Kubernetes'
	// finalizers): the object is gone for its users.
	Deleting bool
}

// Store keeps one kind of object per namespace. The API writes only specs through it.
type Store[S, St any] interface {
	List(ctx context.Context, ns string) ([]Object[S, St], error)
	// Get returns ErrNotFound for a missing object.
	Get(ctx context.Context, ns, name string) (Object[S, St], error)
	// Create stores a new object (generation 1, empty status); ErrAlreadyExists when the name is taken.
	Create(ctx context.Context, ns string, spec S) (Object[S, St], error)
	// Update applies fn to the stored spec atomically; an error from fn aborts and is returned. The
	// generation moves only when the spec changed.
	Update(ctx context.Context, ns, name string, fn func(*S) error) (Object[S, St], error)
	// Delete returns ErrNotFound for a missing object.
	Delete(ctx context.Context, ns, name string) error
}

// FunctionSpec is what the API stores for a function: the user's settings and the code to run.
type FunctionSpec struct {
	Name       string            `json:"name"`
	Runtime    string            `json:"runtime"`
	Entrypoint string            `json:"entrypoint,omitempty"`
	MemoryMB   int               `json:"memory_mb,omitempty"`
	TimeoutSec int               `json:"timeout_sec,omitempty"`
	EnvVars    map[string]string `json:"env_vars,omitempty"`
	// SecretEnv (NAME → "secret/key") and SecretFiles (directory → secret) refer to the
	// namespace's secrets; values are looked up when an instance starts.
	SecretEnv   map[string]string `json:"secret_env,omitempty"`
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	// Scale (stored with the defaults applied).
	MinReplicas    int `json:"min_replicas,omitempty"`
	MaxReplicas    int `json:"max_replicas,omitempty"`
	Concurrency    int `json:"concurrency,omitempty"`
	IdleTimeoutSec int `json:"idle_timeout_sec,omitempty"`
	// Async is the function's asynchronous invocation as last set, defaults filled in (nil: never
	// set; off unless Enabled). Only the API reads it: a change restarts nothing.
	Async *apiv1.AsyncConfig `json:"async,omitempty"`
	// CodeSHA256 names the uploaded archive to run ("" until the first upload).
	CodeSHA256 string `json:"code_sha256,omitempty"`
}

// WithScaleDefaults fills in the scale a record stored before the scale fields existed lacks.
func (s FunctionSpec) WithScaleDefaults() FunctionSpec {
	s.MaxReplicas = cmp.Or(s.MaxReplicas, max(apiv1.DefaultMaxReplicas, s.MinReplicas))
	s.Concurrency = cmp.Or(s.Concurrency, apiv1.DefaultConcurrency)
	s.IdleTimeoutSec = cmp.Or(s.IdleTimeoutSec, apiv1.DefaultIdleTimeout)
	return s
}

// TriggerSpec is what the API stores for a trigger; only Enabled changes after creation.
type TriggerSpec struct {
	Name        string            `json:"name"`
	Type        apiv1.TriggerType `json:"type"`
	FunctionRef string            `json:"function_ref"`
	Schedule    string            `json:"schedule,omitempty"`
	// RabbitMQ is a rabbitmq trigger's queue, defaults filled in.
	RabbitMQ *apiv1.RabbitMQTrigger `json:"rabbitmq,omitempty"`
	Enabled  *bool                  `json:"enabled,omitempty"`
}

// JobSpec is what the API stores for a job; a higher RunID asks for another run.
type JobSpec struct {
	Name        string `json:"name"`
	FunctionRef string `json:"function_ref"`
	EventJSON   string `json:"event_json,omitempty"`
	RunID       int64  `json:"run_id"`
}

// Stored objects of each kind.
type (
	Function = Object[FunctionSpec, lifecycle.FunctionStatus]
	Trigger  = Object[TriggerSpec, apiv1.TriggerStatus]
	Job      = Object[JobSpec, apiv1.JobStatus]
)

// Namespaces creates and removes tenants' namespaces.
type Namespaces interface {
	Ensure(ctx context.Context, ns string) error
	Exists(ctx context.Context, ns string) (bool, error)
	// Delete removes the namespace and everything left in it.
	Delete(ctx context.Context, ns string) error
}

// Resolver finds where a Ready function listens. It returns ErrNotFound or *NotReadyError when it
// cannot route there.
type Resolver interface {
	Resolve(ctx context.Context, ns, name string) (*url.URL, error)
}

// Invocations records calls through /fn/ and lists them newest first.
type Invocations interface {
	// Record keeps one call. It is on /fn/'s path: it must not block on I/O.
	Record(ctx context.Context, ns, name string, inv apiv1.Invocation)
	// List returns a function's records newest first, as q selects. A store that cannot answer
	// now (its database is away) returns *NotReadyError.
	List(ctx context.Context, ns, name string, q InvocationQuery) ([]apiv1.Invocation, error)
	// Forget drops a deleted function's records.
	Forget(ctx context.Context, ns, name string) error
}

// InvocationQuery selects a page of a function's invocations.
type InvocationQuery struct {
	// Limit is the most records returned; ≤ 0 means DefaultInvocationLimit.
	Limit int
	// Before, when set, keeps only records strictly older than it (the Time of the last record of
	// the previous page); zero starts at the newest.
	Before time.Time
}

// DefaultInvocationLimit and MaxInvocationLimit bound GET …/invocations?limit=.
const (
	DefaultInvocationLimit = 100
	MaxInvocationLimit     = 1000
)

// Backend is everything the API needs from a platform.
type Backend struct {
	Namespaces  Namespaces
	Functions   Store[FunctionSpec, lifecycle.FunctionStatus]
	Triggers    Store[TriggerSpec, apiv1.TriggerStatus]
	Jobs        Store[JobSpec, apiv1.JobStatus]
	Secrets     Secrets
	Invocations Invocations
	Code        codestore.Store
	// Logs reads the instances' output (GET …/logs); nil answers 503 there. The build log and
	// the events come from Code (package fnlog).
	Logs     Logs
	Resolver Resolver
	// Instances, when set, lists a function's instances (ready and starting) for /fn/'s
	// activator, and Scaler is told when requests wait for one; then Resolver is not used by /fn/.
	// Without them /fn/ routes to what Resolver answers, and a function with no instance fails at
	// once (503) instead of waiting.
	Instances activator.Source
	Scaler    activator.Scaler
	// Serving, when set, is what /fn/ reads functions and triggers from on every request: a view
	// that may lag the stores above by a moment but costs no round trip (the Kubernetes backend's
	// informer cache). Nil: /fn/ reads the stores above.
	Serving *ServingView
	// Egress keeps the namespaces' egress rules (GET/PUT …/egress); nil answers 503 there.
	Egress Egress
	// Async keeps asynchronous invocations (/fn/ with X-Sless-Invocation-Type: Event); nil: the
	// install keeps none, and a function cannot enable async.
	Async AsyncQueue
	// TriggerTypes are the trigger types the backend runs; the API refuses others (400). Nil: http
	// and cron.
	TriggerTypes []apiv1.TriggerType
	// RuntimeImages, when set, says which runtime image, by digest, this install builds each
	// runtime's functions on (GET /v1/runtimes shows it); nil lists the runtimes without images.
	RuntimeImages RuntimeImages
}

// Runs reports whether the backend runs triggers of type t.
func (b Backend) Runs(t apiv1.TriggerType) bool {
	if b.TriggerTypes == nil {
		return t == apiv1.TriggerHTTP || t == apiv1.TriggerCron
	}
	return slices.Contains(b.TriggerTypes, t)
}

// RuntimeImages are the runtime images a backend builds functions on (build.Pipeline is one).
type RuntimeImages interface {
	// RuntimeImage is the image by digest functions of runtime rt are built on, if the install has one.
	RuntimeImage(rt string) (image string, ok bool)
}

// RuntimeImageMap is RuntimeImages from a fixed map of runtime names to images by digest (the
// operator's --runtime flags).
type RuntimeImageMap map[string]string

// RuntimeImage implements RuntimeImages.
func (m RuntimeImageMap) RuntimeImage(rt string) (string, bool) {
	ref, ok := m[rt]
	return ref, ok
}

var _ RuntimeImages = RuntimeImageMap(nil)

// ServingView is the read side /fn/ needs per request.
type ServingView struct {
	Functions interface {
		Get(ctx context.Context, ns, name string) (Function, error)
	}
	Triggers interface {
		List(ctx context.Context, ns string) ([]Trigger, error)
	}
}

// Validate reports what b lacks that every backend must give.
func (b Backend) Validate() error {
	switch {
	case b.Namespaces == nil, b.Functions == nil, b.Triggers == nil, b.Jobs == nil, b.Secrets == nil:
		return errors.New("objects: Backend needs Namespaces, Functions, Triggers, Jobs and Secrets stores")
	case b.Invocations == nil, b.Code == nil, b.Resolver == nil:
		return errors.New("objects: Backend needs Invocations, Code and Resolver")
	}
	return nil
}
