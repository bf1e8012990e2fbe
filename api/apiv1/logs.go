package apiv1

import (
	"fmt"
	"strconv"
	"time"
)

// LogLine is one line of a function's output or of its last build's log: GET
// …/functions/{name}/logs answers them as NDJSON, one object per line, oldest first.
type LogLine struct {
	Time time.Time `json:"time"`
	// Instance is the instance (container or pod) that wrote the line; "build" for the build log.
	Instance string `json:"instance"`
	// Stream is StreamStdout or StreamStderr where the platform keeps them apart, StreamOutput
	// where it does not (Kubernetes' log API merges them), StreamBuild for the build log.
	Stream string `json:"stream"`
	Line   string `json:"line"`
}

// Streams of a LogLine.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamOutput = "output"
	StreamBuild  = "build"
)

// Sources of GET …/logs?source=.
const (
	LogSourceInstances = "instances" // the default: what the function's instances print
	LogSourceBuild     = "build"     // the last build's stage lines and installer output
)

// Bounds of GET …/logs?tail=.
const (
	DefaultLogTail = 100
	MaxLogTail     = 10000
)

// MaxLogLine is the longest line kept (longer ones are cut, with "…" at the end): a function
// cannot make one line of its output cost the platform more.
const MaxLogLine = 16 << 10

// Event is one step of a function's lifecycle: GET …/functions/{name}/events answers them as
// NDJSON, oldest first.
type Event struct {
	Time time.Time `json:"time"`
	// Type is EventNormal or EventWarning (Kubernetes' event types).
	Type string `json:"type"`
	// Reason is the stage: one of the Reason* constants.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// CodeSHA256 is the code the step was about, when it was about one.
	CodeSHA256 string `json:"code_sha256,omitempty"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Stages of a function's lifecycle, as Event reasons (and the Kubernetes conditions' reasons).
const (
	ReasonStored                 = "Stored"                 // the code archive is in the code store
	ReasonInstallingDependencies = "InstallingDependencies" // a dependency install runs (cache miss)
	ReasonBuilding               = "Building"               // the image is being assembled
	ReasonPushing                = "Pushing"                // the image goes to the registry
	ReasonBuilt                  = "Built"                  // the image is in the registry
	ReasonStarting               = "Starting"               // the new version's first instance starts
	ReasonReady                  = "Ready"                  // the new version serves
	ReasonFailed                 = "Failed"                 // a build or start failed (Message says which and why)

	// Warnings the API records when a function is created or updated (RuntimePolicy.Admit).
	ReasonRuntimeDeprecated = "RuntimeDeprecated" // its runtime is deprecated: move to the replacement
	ReasonRuntimeBlocked    = "RuntimeBlocked"    // its runtime is blocked: it keeps running, no new function may use it

	// Condition reasons that are states rather than steps.
	ReasonPending       = "Pending"       // no code uploaded yet
	ReasonDisabled      = "Disabled"      // its http triggers switch it off: no instance runs
	ReasonDeleting      = "Deleting"      // deleted; the platform removes what is left of it
	ReasonQuotaExceeded = "QuotaExceeded" // the tenant's quota stops a scale-up (condition ScaleLimited)
	// ReasonDeadLettered (a Warning): an event was given up: an asynchronous invocation, or a
	// rabbitmq trigger's message sent to its dead-letter queue (the single host).
	ReasonDeadLettered = "DeadLettered"
)

// Reasons are every reason a function's events and conditions carry, on both backends.
var Reasons = []string{ReasonStored, ReasonInstallingDependencies, ReasonBuilding, ReasonPushing, ReasonBuilt, ReasonStarting,
	ReasonReady, ReasonFailed, ReasonPending, ReasonDisabled, ReasonDeleting, ReasonQuotaExceeded, ReasonRuntimeDeprecated, ReasonRuntimeBlocked,
	ReasonDeadLettered}

// ParseSince reads GET …/logs?since=: an RFC 3339 time, or a duration back from now such as "5m"
// or "1h30m" (kubectl logs --since).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("since %q is neither an RFC 3339 time nor a positive duration such as 5m", s)
	}
	return now.Add(-d), nil
}

// ParseTail reads GET …/logs?tail= (DefaultLogTail when empty).
func ParseTail(s string) (int, error) {
	if s == "" {
		return DefaultLogTail, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxLogTail {
		return 0, fmt.Errorf("tail %q must be a whole number from 0 to %d", s, MaxLogTail)
	}
	return n, nil
}

// Condition is one aspect of a function's state in Kubernetes' form: Type ConditionBuilt or
// ConditionReady, Status "True", "False" or "Unknown", Reason one of the Reason* stages.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"last_transition_time"`
}

// Condition types of a function.
const (
	ConditionBuilt = "Built" // the current code's image is in the registry
	ConditionReady = "Ready" // the current version serves
	// ConditionScaleLimited is True while the tenant's quota stops a scale-up. It is kept by the
	// platform and shown as FunctionStatus.ScaleLimited, not among the wire's conditions.
	ConditionScaleLimited = "ScaleLimited"
)

// SetCondition sets c in conds, keeping the time of the last transition when the status stays
// (as Kubernetes' meta.SetStatusCondition does); c's zero time means now.
func SetCondition(conds *[]Condition, c Condition) {
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = time.Now().UTC().Truncate(time.Second)
	}
	for i, old := range *conds {
		if old.Type == c.Type {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			(*conds)[i] = c
			return
		}
	}
	*conds = append(*conds, c)
}

// FindCondition returns the condition of type t, or nil.
func FindCondition(conds []Condition, t string) *Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
