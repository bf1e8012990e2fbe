package apiv1

import (
	"fmt"
	"time"
)

// Asynchronous invocation: a request to /fn/ with X-Sless-Invocation-Type: Event is stored and
// answered 202 at once; the platform calls the function later, retrying and dead-lettering as a
// rabbitmq trigger does.
const (
	HeaderInvocationType = "X-Sless-Invocation-Type"
	InvocationTypeEvent  = "Event"
	// SourceAsync is the event source of an asynchronous invocation (Invocation.Source); its
	// MessageID is the invocation's id.
	SourceAsync = "async"
)

// AsyncConfig lets a function be invoked asynchronously. Off by default: /fn/ is public, and an
// accepted event costs the platform storage until it is delivered.
type AsyncConfig struct {
	Enabled bool `json:"enabled"`
	// MaxRetries: an event the function fails on (5xx, a timeout, a lost instance) is tried again
	// up to this many times, a second apart and doubling; default 2 (three attempts in all).
	MaxRetries *int `json:"max_retries,omitempty"`
	// MaxAgeSec: an event not delivered this long after it was accepted (or redriven) is
	// dead-lettered instead of tried again; default and at most 21600 (6 hours).
	MaxAgeSec int `json:"max_age_sec,omitempty"`
	// MaxQueued bounds the function's events not yet done (queued, running or waiting for a
	// retry); beyond it /fn/ answers 429. Default 10,000.
	MaxQueued int `json:"max_queued,omitempty"`
}

// Defaults and bounds of AsyncConfig.
const (
	DefaultAsyncMaxRetries = 2
	MaxAsyncMaxRetries     = 10
	DefaultAsyncMaxAgeSec  = 21600
	MinAsyncMaxAgeSec      = 60
	DefaultAsyncMaxQueued  = 10_000
	MaxAsyncMaxQueued      = 100_000
	// MaxAsyncBodyBytes bounds an asynchronous request's body: it is stored until delivered.
	MaxAsyncBodyBytes = 256 << 10
)

// WithDefaults returns c with its defaults filled in.
func (c AsyncConfig) WithDefaults() AsyncConfig {
	if c.MaxRetries == nil {
		n := DefaultAsyncMaxRetries
		c.MaxRetries = &n
	}
	if c.MaxAgeSec == 0 {
		c.MaxAgeSec = DefaultAsyncMaxAgeSec
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultAsyncMaxQueued
	}
	return c
}

// Validate checks c's bounds (after WithDefaults).
func (c AsyncConfig) Validate() error {
	switch {
	case c.MaxRetries != nil && (*c.MaxRetries < 0 || *c.MaxRetries > MaxAsyncMaxRetries):
		return Errorf(CodeInvalidArgument, "async.max_retries %d: must be 0 to %d", *c.MaxRetries, MaxAsyncMaxRetries)
	case c.MaxAgeSec < MinAsyncMaxAgeSec || c.MaxAgeSec > DefaultAsyncMaxAgeSec:
		return Errorf(CodeInvalidArgument, "async.max_age_sec %d: must be %d to %d", c.MaxAgeSec, MinAsyncMaxAgeSec, DefaultAsyncMaxAgeSec)
	case c.MaxQueued < 1 || c.MaxQueued > MaxAsyncMaxQueued:
		return Errorf(CodeInvalidArgument, "async.max_queued %d: must be 1 to %d", c.MaxQueued, MaxAsyncMaxQueued)
	}
	return nil
}

// MaxAge is MaxAgeSec as a duration.
func (c AsyncConfig) MaxAge() time.Duration { return time.Duration(c.MaxAgeSec) * time.Second }

// AsyncState is where an asynchronous invocation is.
type AsyncState string

const (
	// AsyncQueued: accepted, not tried yet (or redriven).
	AsyncQueued AsyncState = "queued"
	// AsyncRunning: an attempt is under way.
	AsyncRunning AsyncState = "running"
	// AsyncFailed: its last attempt failed and it waits for a retry (next_attempt says when).
	AsyncFailed AsyncState = "failed"
	// AsyncSucceeded: the function answered 2xx.
	AsyncSucceeded AsyncState = "succeeded"
	// AsyncDeadLettered: given up (retries used, a 4xx, older than max_age_sec), with the reason
	// in error; listed by GET …/dead-letters and redriven from there.
	AsyncDeadLettered AsyncState = "dead_lettered"
)

// Done reports whether s is final until a redrive.
func (s AsyncState) Done() bool { return s == AsyncSucceeded || s == AsyncDeadLettered }

// AsyncAccepted answers a 202 of /fn/.
type AsyncAccepted struct {
	ID string `json:"id"`
	// StatusURL is GET …/functions/{name}/async/{id}, the API's (it needs the tenant's token).
	StatusURL string `json:"status_url"`
}

// AsyncInvocation answers GET …/functions/{name}/async/{id} and lists dead letters.
type AsyncInvocation struct {
	ID       string         `json:"id"`
	State    AsyncState     `json:"state"`
	Attempts []AsyncAttempt `json:"attempts"`
	Created  time.Time      `json:"created"`
	// Error is why the last attempt failed, or why it was dead-lettered.
	Error string `json:"error,omitempty"`
	// NextAttempt is when a queued or failed invocation is tried next.
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
	// Redriven is when it was last sent back from the dead letters; max_age_sec counts from it.
	Redriven *time.Time `json:"redriven,omitempty"`
}

// AsyncAttempt is one call of the function for an asynchronous invocation.
type AsyncAttempt struct {
	Time       time.Time `json:"time"`
	Status     int       `json:"status"` // 0: no answer (error says why)
	DurationMS float64   `json:"duration_ms"`
	Error      string    `json:"error,omitempty"`
}

// ValidAsyncID checks an invocation id in a path: what NewAsyncID makes.
func ValidAsyncID(id string) error {
	if len(id) != 32 {
		return Errorf(CodeInvalidArgument, "invocation id %q: must be 32 hex digits", id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Errorf(CodeInvalidArgument, "invocation id %q: must be 32 hex digits", id)
		}
	}
	return nil
}

// FormatAsyncID makes an id that sorts by time: 12 hex digits of Unix milliseconds, then 20 of
// random bits.
func FormatAsyncID(t time.Time, random [10]byte) string {
	return fmt.Sprintf("%012x%x", t.UnixMilli()&(1<<48-1), random)
}
