package objects

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// ErrQueueFull: an Enqueue or a Redrive would take a function beyond its async.max_queued; /fn/
// and the API answer 429.
var ErrQueueFull = errors.New("asynchronous queue full")

// AsyncEvent is one asynchronous invocation as its queue keeps it.
type AsyncEvent struct {
	ID                  string
	Namespace, Function string
	State               apiv1.AsyncState
	Created             time.Time
	// Enqueued is when it was accepted or last redriven: max_age_sec counts from it.
	Enqueued time.Time
	Redriven time.Time // zero unless redriven
	// NextAttempt is when a queued or failed event is due.
	NextAttempt time.Time
	Attempts    []apiv1.AsyncAttempt
	// Counted is the attempts counted against max_retries since it was enqueued (back-pressure
	// of /fn/ is not counted, and a redrive starts again at 0).
	Counted int
	Error   string
	Request AsyncRequest
	// Lease is the claim's token while Running (Claim sets it; Settle and Extend must present
	// it): a dispatcher whose lease ran out cannot overwrite what the next one did.
	Lease      string
	LeaseUntil time.Time
}

// AsyncRequest is what is sent to the function: the request /fn/ took, minus what only concerned
// /fn/.
type AsyncRequest struct {
	Method string      `json:"method"`
	Path   string      `json:"path"` // below /fn/{ns}/{name}, escaped, with its query: "/a?b=c"; "" for none
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

// Wire is the API's answer for e.
func (e AsyncEvent) Wire() apiv1.AsyncInvocation {
	out := apiv1.AsyncInvocation{ID: e.ID, State: e.State, Attempts: e.Attempts, Created: e.Created.UTC(), Error: e.Error}
	if out.Attempts == nil {
		out.Attempts = []apiv1.AsyncAttempt{}
	}
	if (e.State == apiv1.AsyncQueued || e.State == apiv1.AsyncFailed) && !e.NextAttempt.IsZero() {
		t := e.NextAttempt.UTC()
		out.NextAttempt = &t
	}
	if !e.Redriven.IsZero() {
		t := e.Redriven.UTC()
		out.Redriven = &t
	}
	return out
}

// Pending reports whether e counts against its function's queue depth: not done yet.
func (e AsyncEvent) Pending() bool { return !e.State.Done() }

// AsyncQueue keeps asynchronous invocations durably until they are delivered or given up, for
// any number of dispatchers (API replicas) at once.
type AsyncQueue interface {
	// Enqueue stores ev (State queued, due at NextAttempt), unless its function already has max
	// pending events: then ErrQueueFull and nothing is stored.
	Enqueue(ctx context.Context, ev AsyncEvent, max int) error
	// Claim takes up to n events due at now — queued or failed ones whose NextAttempt has come,
	// and running ones whose lease ran out (their dispatcher went away) — marks them running under
	// a new lease until now+lease, and returns them. next is when the earliest event left is due
	// (zero: none is waiting).
	Claim(ctx context.Context, now time.Time, lease time.Duration, n int) (claimed []AsyncEvent, next time.Time, err error)
	// Extend moves the lease of a running event still held under ev.Lease to until; ErrConflict
	// when it is not held under that lease any more.
	Extend(ctx context.Context, ev AsyncEvent, until time.Time) error
	// Settle stores what became of a claimed event (its State, Attempts, Counted, Error,
	// NextAttempt), if it is still held under ev.Lease; else ErrConflict and nothing changes.
	Settle(ctx context.Context, ev AsyncEvent) error
	// Get returns one event of a function; ErrNotFound when that function has no such event.
	Get(ctx context.Context, ns, name, id string) (AsyncEvent, error)
	// DeadLetters lists a function's dead-lettered events, newest first, at most limit.
	DeadLetters(ctx context.Context, ns, name string, limit int) ([]AsyncEvent, error)
	// Redrive queues a dead-lettered event again (due now, Counted 0, Enqueued and Redriven now,
	// its attempts kept); ErrNotFound when the function has no such event, ErrConflict when it is
	// not dead-lettered, ErrQueueFull beyond max pending.
	Redrive(ctx context.Context, ns, name, id string, now time.Time, max int) (AsyncEvent, error)
	// Forget drops every event of a deleted function.
	Forget(ctx context.Context, ns, name string) error
	// Purge drops succeeded events finished before succeeded and dead letters before dead.
	Purge(ctx context.Context, succeeded, dead time.Time) (int, error)
	// Stats is every function's pending depth and its oldest pending event's Enqueued time.
	Stats(ctx context.Context) ([]AsyncStats, error)
}

// AsyncStats is one function's queue.
type AsyncStats struct {
	Namespace, Function string
	Depth               int
	Oldest              time.Time
	DeadLetters         int
}
