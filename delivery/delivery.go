package delivery

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/api/apiv1"
)

// Defaults of a Policy's zero fields.
const (
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 5 * time.Minute
)

// Policy is a trigger's or a function's retry rule.
type Policy struct {
	// MaxRetries is how many times a failed event is tried again: at most MaxRetries+1 counted
	// attempts, then it is dead-lettered.
	MaxRetries int
	// Backoff is the wait before the first retry; each further retry waits twice the one before,
	// up to MaxBackoff. Zero means DefaultBackoff, DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// Outcome is what one attempt got.
type Outcome struct {
	// Status is the HTTP status answered, 0 when none was (a timeout, a lost instance, a refused
	// connection: Err says which).
	Status int
	// FromFunction tells the function's own answer from /fn/'s (the platform's 413, 429, 503…).
	FromFunction bool
	// RetryAfter is /fn/'s Retry-After on back-pressure, 0 when none was sent.
	RetryAfter time.Duration
	// Err is why no status came.
	Err error
}

// Action is what becomes of the event.
type Action int

const (
	// Ack: answered 2xx; acknowledge it, and it is done.
	Ack Action = iota
	// Retry: try again after Decision.After.
	Retry
	// DeadLetter: give it up to the dead letters, with Decision.Reason, then acknowledge it.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is what to do after an attempt.
type Decision struct {
	Action Action
	// After is how long to wait before the retry.
	After time.Duration
	// Counts is whether the attempt counts against MaxRetries: back-pressure from /fn/ (429,
	// 503) does not, since the function was never called.
	Counts bool
	// Reason says why the event failed (the dead letter's header, the trigger's last_error); empty
	// on Ack.
	Reason string
}

// Decide is the rule for outcome o of an attempt, after counted earlier attempts before it:
//   - 2xx: Ack.
//   - /fn/'s own 429 or 503 (the platform is saturated, the function was not called): Retry after
//     Retry-After (or the first backoff), not counted.
//   - the function's own 4xx, and any other 4xx of /fn/'s (413: the body is too large; 404: no
//     such function): DeadLetter at once — sending the same event again gets the same answer.
//   - anything else (5xx, a timeout, a lost instance, no answer): Retry with backoff while
//     retries are left, then DeadLetter naming the last failure.
func (p Policy) Decide(o Outcome, earlier int) Decision {
	switch {
	case o.Status >= 200 && o.Status < 300:
		return Decision{Action: Ack, Counts: true}
	case !o.FromFunction && (o.Status == http.StatusTooManyRequests || o.Status == http.StatusServiceUnavailable):
		after := o.RetryAfter
		if after <= 0 {
			after = p.backoff(1)
		}
		return Decision{Action: Retry, After: min(after, p.maxBackoff()), Reason: describe(o)}
	case o.Status >= 400 && o.Status < 500:
		return Decision{Action: DeadLetter, Counts: true, Reason: describe(o) + " (not retried: the same event would get the same answer)"}
	}
	attempts := earlier + 1
	if attempts > p.MaxRetries {
		return Decision{Action: DeadLetter, Counts: true, Reason: fmt.Sprintf("%s after %d attempts", describe(o), attempts)}
	}
	return Decision{Action: Retry, Counts: true, After: p.backoff(attempts), Reason: describe(o)}
}

// backoff is the wait before retry n (1 is the first): Backoff·2^(n-1), at most MaxBackoff.
func (p Policy) backoff(n int) time.Duration {
	d, limit := p.Backoff, p.maxBackoff()
	if d <= 0 {
		d = DefaultBackoff
	}
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (p Policy) maxBackoff() time.Duration {
	if p.MaxBackoff <= 0 {
		return DefaultMaxBackoff
	}
	return p.MaxBackoff
}

// describe names an outcome for a person: "the function answered 500", "/fn/ answered 413",
// "no answer: context deadline exceeded".
func describe(o Outcome) string {
	switch {
	case o.Status == 0 && o.Err != nil:
		return "no answer: " + o.Err.Error()
	case o.Status == 0:
		return "no answer"
	case o.FromFunction:
		return fmt.Sprintf("the function answered %d", o.Status)
	}
	return fmt.Sprintf("/fn/ answered %d", o.Status)
}

// Metrics counts what becomes of events, by source ("rabbitmq", "async") and result ("acked",
// "retried", "dead_lettered"): sless_deliveries_total.
type Metrics struct {
	deliveries *prometheus.CounterVec
}

// NewMetrics makes the series; register them with Collectors.
func NewMetrics() *Metrics {
	return &Metrics{deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sless_deliveries_total",
		Help: "Attempts to hand an event to its function, by event source and what became of the event: acked (answered 2xx), retried, dead_lettered.",
	}, []string{"source", "result"})}
}

// Collectors are the series to register.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.deliveries} }

// Observe counts decision d of an event from source.
func (m *Metrics) Observe(source string, d Decision) {
	m.deliveries.WithLabelValues(source, result(d.Action)).Inc()
}

// result is an action's label.
func result(a Action) string {
	switch a {
	case Ack:
		return "acked"
	case DeadLetter:
		return "dead_lettered"
	}
	return "retried"
}

// Read is the Outcome of an answer of /fn/: whether the function or /fn/ itself answered (/fn/
// marks its own with apiv1.HeaderError), and /fn/'s Retry-After. Status 0 (nothing written) is
// a 200, as net/http answers.
func Read(status int, h http.Header) Outcome {
	if status == 0 {
		status = http.StatusOK
	}
	o := Outcome{Status: status, FromFunction: h.Get(apiv1.HeaderError) == ""}
	if !o.FromFunction {
		if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
			o.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return o
}

// Answer is an http.ResponseWriter for /fn/ called in process by an event source: it keeps the
// status and headers and drops the body (nobody waits for it).
type Answer struct {
	header http.Header
	status int
}

// Header implements http.ResponseWriter.
func (a *Answer) Header() http.Header {
	if a.header == nil {
		a.header = http.Header{}
	}
	return a.header
}

// WriteHeader implements http.ResponseWriter.
func (a *Answer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// Write implements http.ResponseWriter.
func (a *Answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return len(b), nil
}

// Flush implements http.Flusher (a streamed answer).
func (a *Answer) Flush() {}

// Outcome is what the answer says.
func (a *Answer) Outcome() Outcome { return Read(a.status, a.Header()) }

// Written reports whether anything was answered.
func (a *Answer) Written() bool { return a.status != 0 }

// Add counts n events from source that ended as action (a report of an event source outside the
// process).
func (m *Metrics) Add(source string, action Action, n int64) {
	if n > 0 {
		m.deliveries.WithLabelValues(source, result(action)).Add(float64(n))
	}
}

// EventRecorder writes a function's events (fnlog.Events): where a dead letter is told.
type EventRecorder interface {
	Record(ctx context.Context, ns, name string, ev apiv1.Event) error
}

// DeadLettered is the Warning event of a rabbitmq trigger's message given up, on both backends
// (the single host records it in process, the Kubernetes consumer's report through the API).
func DeadLettered(messageID, trigger, dlq, reason string) apiv1.Event {
	if messageID == "" {
		messageID = "(no message id)"
	}
	return apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonDeadLettered,
		Message: fmt.Sprintf("message %s of rabbitmq trigger %s dead-lettered to %s: %s", messageID, trigger, dlq, reason)}
}
