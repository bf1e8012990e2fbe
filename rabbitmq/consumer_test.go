package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/rabbitmq"
)

// fast is a policy whose retries take milliseconds.
var fast = delivery.Policy{MaxRetries: 5, Backoff: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

// recorder is an Invoker that answers with answer() and remembers what it was asked.
type recorder struct {
	mu       sync.Mutex
	answer   func(m rabbitmq.Message) delivery.Outcome
	calls    map[string]int // message id → attempts
	ok       map[string]int // message id → 2xx answers
	order    []string       // message ids answered 2xx, in order
	changed  chan struct{}
	attempts []rabbitmq.Message
}

func newRecorder(answer func(m rabbitmq.Message) delivery.Outcome) *recorder {
	return &recorder{answer: answer, calls: map[string]int{}, ok: map[string]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) Invoke(_ context.Context, m rabbitmq.Message) delivery.Outcome {
	out := r.answer(m)
	r.mu.Lock()
	r.calls[m.MessageID]++
	r.attempts = append(r.attempts, m)
	if out.Status >= 200 && out.Status < 300 {
		r.ok[m.MessageID]++
		r.order = append(r.order, m.MessageID)
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return out
}

// waitFor waits until cond holds over the recorder (checked at every call) or fails the test.
func (r *recorder) waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		done := cond()
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// publish sends one message per id: body "body <id>", correlation id "c-<id>", a header of its own.
func publish(t *testing.T, mq *testenv.RabbitMQ, queue string, ids ...string) {
	t.Helper()
	msgs := make([]amqp.Publishing, len(ids))
	for i, id := range ids {
		msgs[i] = amqp.Publishing{MessageId: id, CorrelationId: "c-" + id, ContentType: "text/plain",
			Headers: amqp.Table{"tenant-header": "v-" + id}, Body: []byte("body " + id)}
	}
	mq.Publish(t, queue, msgs...)
}

func start(t *testing.T, cfg rabbitmq.Config, inv rabbitmq.Invoker) *rabbitmq.Consumer {
	t.Helper()
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	c, err := rabbitmq.New(cfg, inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// waitStatus waits until cond holds of the consumer's status.
func waitStatus(t *testing.T, c *rabbitmq.Consumer, what string, d time.Duration, cond func(rabbitmq.Status) bool) rabbitmq.Status {
	t.Helper()
	deadline := time.After(d)
	for {
		ch := c.Changed()
		if s := c.Status(); cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: not within %v; status %+v", what, d, c.Status())
		}
	}
}

func ok200(rabbitmq.Message) delivery.Outcome {
	return delivery.Outcome{Status: 200, FromFunction: true}
}

// At least once, nothing lost, counted: 1,000 messages, the function fails 20 % of calls at
// random, the broker is restarted once mid-run. Every message is answered 2xx at least once or
// is in the dead-letter queue; none is missing.
func TestAtLeastOnceThroughARestart(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	const n = 1000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	publish(t, mq, "orders", ids...)
	inv := newRecorder(func(rabbitmq.Message) delivery.Outcome {
		if rand.IntN(5) == 0 {
			return delivery.Outcome{Status: 500, FromFunction: true}
		}
		return ok200(rabbitmq.Message{})
	})
	c := start(t, rabbitmq.Config{URL: mq.URL(), Queue: "orders", DeadLetter: "orders.dlq", Prefetch: 20, Policy: fast}, inv)

	inv.waitFor(t, "300 messages answered", time.Minute, func() bool { return len(inv.ok) >= 300 })
	mq.Stop(t)
	waitStatus(t, c, "disconnected", time.Minute, func(s rabbitmq.Status) bool { return !s.Connected })
	mq.Start(t)
	waitStatus(t, c, "reconnected", time.Minute, func(s rabbitmq.Status) bool { return s.Connected })

	s := waitStatus(t, c, "every message answered or dead-lettered", 2*time.Minute, func(s rabbitmq.Status) bool {
		inv.mu.Lock()
		answered := len(inv.ok)
		inv.mu.Unlock()
		return answered+int(s.DeadLettered) >= n && s.InFlight == 0
	})
	dead := mq.Drain(t, "orders.dlq")
	if !queueEmpty(t, mq, "orders") {
		t.Error("messages left in the queue")
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	missing, dup := 0, 0
	for _, id := range ids {
		_, dl := dead[id]
		switch {
		case inv.ok[id] == 0 && !dl:
			missing++
			t.Errorf("message %s: never answered 2xx and not dead-lettered", id)
		case inv.ok[id] > 1:
			dup += inv.ok[id] - 1
		}
	}
	t.Logf("sent %d, answered 2xx %d (duplicates %d), dead-lettered %d, lost %d; status %+v", n, len(inv.ok), dup, len(dead), missing, s)
	for id, d := range dead {
		if d.Headers[rabbitmq.HeaderError] == nil || d.Headers["tenant-header"] != "v-"+id {
			t.Errorf("dead letter %s headers %v", id, d.Headers)
		}
	}
}

func queueEmpty(t *testing.T, mq *testenv.RabbitMQ, queue string) bool {
	return mq.Queue(t, queue).Messages == 0
}

// With prefetch 1 messages are answered in the order they were published, retries included.
func TestPrefetchOneKeepsOrder(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("m%02d", i))
	}
	publish(t, mq, "q", ids...)
	inv := newRecorder(func(m rabbitmq.Message) delivery.Outcome {
		if m.Attempt == 1 && m.MessageID[len(m.MessageID)-1]%3 == 0 {
			return delivery.Outcome{Status: 503, FromFunction: true}
		}
		return ok200(m)
	})
	start(t, rabbitmq.Config{URL: mq.URL(), Queue: "q", DeadLetter: "q.dlq", Prefetch: 1, Policy: fast}, inv)
	inv.waitFor(t, "every message answered", time.Minute, func() bool { return len(inv.order) >= len(ids) })
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if got := strings.Join(inv.order, ","); got != strings.Join(ids, ",") {
		t.Errorf("answered in order %s", got)
	}
}

// A message the function always fails on reaches the dead-letter queue after max_retries+1
// attempts, with the last error, and the messages behind it are still delivered. The function's
// own 4xx dead-letters at once; /fn/'s 429 and 503 are retried without counting.
func TestDeadLetters(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	publish(t, mq, "q", "poison", "after", "bad-request", "throttled")
	throttled := 0
	inv := newRecorder(func(m rabbitmq.Message) delivery.Outcome {
		switch m.MessageID {
		case "poison":
			return delivery.Outcome{Status: 500, FromFunction: true}
		case "bad-request":
			return delivery.Outcome{Status: 400, FromFunction: true}
		case "throttled":
			if throttled++; throttled <= 8 { // more than max_retries, none counted
				status := http.StatusTooManyRequests
				if throttled%2 == 0 {
					status = http.StatusServiceUnavailable
				}
				return delivery.Outcome{Status: status, RetryAfter: time.Millisecond}
			}
		}
		return ok200(m)
	})
	pol := delivery.Policy{MaxRetries: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	c := start(t, rabbitmq.Config{URL: mq.URL(), Queue: "q", DeadLetter: "q.dlq", Prefetch: 1, Policy: pol}, inv)
	s := waitStatus(t, c, "all four settled", time.Minute, func(s rabbitmq.Status) bool { return s.Delivered+s.DeadLettered == 4 })
	if s.Delivered != 2 || s.DeadLettered != 2 {
		t.Errorf("status %+v, want 2 delivered, 2 dead-lettered", s)
	}
	inv.mu.Lock()
	calls := maps.Clone(inv.calls)
	inv.mu.Unlock()
	if calls["poison"] != 4 || calls["bad-request"] != 1 || calls["throttled"] != 9 || calls["after"] != 1 {
		t.Errorf("attempts %v, want poison 4 (max_retries 3), bad-request 1, throttled 9, after 1", calls)
	}
	dead := mq.Drain(t, "q.dlq")
	if len(dead) != 2 {
		t.Fatalf("dead letters %v", dead)
	}
	p := dead["poison"]
	if e, _ := p.Headers[rabbitmq.HeaderError].(string); !strings.Contains(e, "500") || !strings.Contains(e, "4 attempts") {
		t.Errorf("poison's %s: %q", rabbitmq.HeaderError, e)
	}
	if p.Headers[rabbitmq.HeaderAttempts] != int32(4) || string(p.Body) != "body poison" || p.CorrelationId != "c-poison" || p.DeliveryMode != amqp.Persistent {
		t.Errorf("poison's dead letter: headers %v body %q correlation %q mode %d", p.Headers, p.Body, p.CorrelationId, p.DeliveryMode)
	}
	if e, _ := dead["bad-request"].Headers[rabbitmq.HeaderError].(string); !strings.Contains(e, "400") {
		t.Errorf("bad-request's %s: %q", rabbitmq.HeaderError, e)
	}
	if !queueEmpty(t, mq, "q") {
		t.Error("messages left in the queue")
	}
}

// A deleted queue ends the broker's consumer; the consumer declares it again and goes on.
func TestQueueDeletedAndDeclaredAgain(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	inv := newRecorder(ok200)
	c := start(t, rabbitmq.Config{URL: mq.URL(), Queue: "q", DeadLetter: "q.dlq", Policy: fast}, inv)
	waitStatus(t, c, "connected", time.Minute, func(s rabbitmq.Status) bool { return s.Connected })
	publish(t, mq, "q", "before")
	inv.waitFor(t, "before answered", time.Minute, func() bool { return inv.ok["before"] == 1 })
	mq.Ctl(t, "delete_queue", "q")
	// Seen, the queue declared again and consumed: a second session (the states between may pass
	// faster than a look at them).
	waitStatus(t, c, "consuming again", time.Minute, func(s rabbitmq.Status) bool { return s.Sessions >= 2 && s.Connected })
	publish(t, mq, "q", "after")
	inv.waitFor(t, "after answered", time.Minute, func() bool { return inv.ok["after"] == 1 })
}

// A passive trigger's missing queue is the status's error until the queue exists; a refused
// address is never connected to; a bad password does not appear in the error.
func TestConnectionErrors(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	t.Run("passive queue missing", func(t *testing.T) {
		inv := newRecorder(ok200)
		c := start(t, rabbitmq.Config{URL: mq.URL(), Queue: "later", Passive: true, DeadLetter: "later.dlq", Policy: fast}, inv)
		waitStatus(t, c, "the missing queue reported", time.Minute, func(s rabbitmq.Status) bool {
			return strings.Contains(s.LastError, `queue "later"`) && strings.Contains(s.LastError, "NOT_FOUND")
		})
		publish(t, mq, "later", "x") // declares it
		inv.waitFor(t, "x answered", time.Minute, func() bool { return inv.ok["x"] == 1 })
	})
	t.Run("address refused", func(t *testing.T) {
		refused := errors.New("the platform's own address")
		var mu sync.Mutex
		var asked []netip.AddrPort
		inv := newRecorder(ok200)
		c := start(t, rabbitmq.Config{URL: mq.URL(), Queue: "q2", DeadLetter: "q2.dlq", Policy: fast, Name: "refused-trigger",
			CheckAddr: func(ap netip.AddrPort) error {
				mu.Lock()
				asked = append(asked, ap)
				mu.Unlock()
				return refused
			}}, inv)
		s := waitStatus(t, c, "the refusal reported", time.Minute, func(s rabbitmq.Status) bool { return strings.Contains(s.LastError, refused.Error()) })
		if s.Connected {
			t.Error("connected")
		}
		mu.Lock()
		if len(asked) == 0 || asked[0].String() != mq.Addr() {
			t.Errorf("CheckAddr asked about %v, want %s", asked, mq.Addr())
		}
		mu.Unlock()
		if out := mq.Ctl(t, "list_connections", "client_properties"); strings.Contains(out, "refused-trigger") {
			t.Errorf("the broker saw a connection of the refused consumer: %s", out)
		}
	})
	// URLFunc is asked before every connection: its error is the status until a URL comes (a
	// secret created later, or rotated), and a URL that does not parse is reported, not quoted.
	t.Run("URL read at every connection", func(t *testing.T) {
		var mu sync.Mutex
		current, missing := "", errors.New(`secret "mq" has no key "url"`)
		inv := newRecorder(ok200)
		c := start(t, rabbitmq.Config{Queue: "q4", DeadLetter: "q4.dlq", Policy: fast, URLFunc: func() (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if current == "" {
				return "", missing
			}
			return current, nil
		}}, inv)
		waitStatus(t, c, "the missing secret reported", time.Minute, func(s rabbitmq.Status) bool { return s.LastError == missing.Error() && !s.Connected })
		mu.Lock()
		current = "http://u:topsecret@h/"
		mu.Unlock()
		s := waitStatus(t, c, "the bad URL reported", time.Minute, func(s rabbitmq.Status) bool { return strings.Contains(s.LastError, "not an amqp") })
		if strings.Contains(s.LastError, "topsecret") {
			t.Errorf("the URL is in the status: %q", s.LastError)
		}
		mu.Lock()
		current = mq.URL()
		mu.Unlock()
		waitStatus(t, c, "connected", time.Minute, func(s rabbitmq.Status) bool { return s.Connected && s.LastError == "" })
		publish(t, mq, "q4", "y")
		inv.waitFor(t, "y answered", time.Minute, func() bool { return inv.ok["y"] == 1 })
	})
	t.Run("wrong password", func(t *testing.T) {
		u, err := url.Parse(mq.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), "s3cr3t-w0rd")
		c := start(t, rabbitmq.Config{URL: u.String(), Queue: "q3", DeadLetter: "q3.dlq", Policy: fast}, newRecorder(ok200))
		s := waitStatus(t, c, "the refusal reported", time.Minute, func(s rabbitmq.Status) bool { return s.LastError != "" })
		if strings.Contains(s.LastError, "s3cr3t-w0rd") {
			t.Errorf("the password is in the status: %q", s.LastError)
		}
		t.Logf("last_error: %s", s.LastError)
	})
}

// New refuses what cannot work and never echoes the URL.
func TestNewRefuses(t *testing.T) {
	inv := newRecorder(ok200)
	for _, c := range []rabbitmq.Config{
		{Queue: "q", DeadLetter: "d"},
		{URL: "amqp://u:p@h/", DeadLetter: "d"},
		{URL: "amqp://u:p@h/", Queue: "q"},
		{URL: "amqp://u:p@h/", Queue: "q", DeadLetter: "q"},
		{URL: "http://u:topsecret@h/", Queue: "q", DeadLetter: "d"},
		{URL: "amqp://u:p@h/", URLFunc: func() (string, error) { return "", nil }, Queue: "q", DeadLetter: "d"},
	} {
		_, err := rabbitmq.New(c, inv, nil)
		if !errors.Is(err, rabbitmq.ErrConfig) || strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// An error that quotes the URL loses its credentials, and nothing else.
func TestRedact(t *testing.T) {
	const u = "amqp://orders:p@broker.example:5672/"
	err := rabbitmq.Redact(fmt.Errorf("dialing %s: the platform's own address", u), u)
	if got := err.Error(); strings.Contains(got, "orders:p@") || !strings.Contains(got, "the platform's own address") {
		t.Errorf("%q", got)
	}
}
