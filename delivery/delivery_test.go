package delivery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/delivery"
)

// Every class of outcome against a policy of 2 retries from 1 s: what is retried, what counts,
// when an event is given up, and the waits.
func TestDecide(t *testing.T) {
	p := delivery.Policy{MaxRetries: 2, Backoff: time.Second, MaxBackoff: 3 * time.Second}
	fn := func(status int) delivery.Outcome { return delivery.Outcome{Status: status, FromFunction: true} }
	fnfn := func(status int) delivery.Outcome { return delivery.Outcome{Status: status} }
	timeout := delivery.Outcome{Err: context.DeadlineExceeded}
	for _, tc := range []struct {
		name    string
		o       delivery.Outcome
		earlier int
		want    delivery.Action
		after   time.Duration
		counts  bool
		reason  string
	}{
		{"200", fn(200), 0, delivery.Ack, 0, true, ""},
		{"204 on the last attempt", fn(204), 2, delivery.Ack, 0, true, ""},
		{"a 500, first attempt", fn(500), 0, delivery.Retry, time.Second, true, "the function answered 500"},
		{"a 500, second attempt", fn(500), 1, delivery.Retry, 2 * time.Second, true, "the function answered 500"},
		{"a 500, the last retry spent", fn(500), 2, delivery.DeadLetter, 0, true, "the function answered 500 after 3 attempts"},
		{"the function's own 503 counts", fn(503), 0, delivery.Retry, time.Second, true, "the function answered 503"},
		{"/fn/'s 502 (the instance went)", fnfn(502), 1, delivery.Retry, 2 * time.Second, true, "/fn/ answered 502"},
		{"/fn/'s 504", fnfn(504), 2, delivery.DeadLetter, 0, true, "/fn/ answered 504 after 3 attempts"},
		{"a timeout", timeout, 0, delivery.Retry, time.Second, true, "no answer: context deadline exceeded"},
		{"a timeout, spent", timeout, 2, delivery.DeadLetter, 0, true, "no answer: context deadline exceeded after 3 attempts"},
		{"the function's 400", fn(400), 0, delivery.DeadLetter, 0, true, "the function answered 400 (not retried"},
		{"the function's own 429 is its answer", fn(429), 0, delivery.DeadLetter, 0, true, "the function answered 429"},
		{"/fn/'s 413", fnfn(413), 0, delivery.DeadLetter, 0, true, "/fn/ answered 413"},
		{"/fn/'s 429 is back-pressure", fnfn(429), 2, delivery.Retry, time.Second, false, "/fn/ answered 429"},
		{"/fn/'s 503 with Retry-After", delivery.Outcome{Status: 503, RetryAfter: 2 * time.Second}, 5, delivery.Retry, 2 * time.Second, false, "/fn/ answered 503"},
		{"a Retry-After beyond the cap", delivery.Outcome{Status: 429, RetryAfter: time.Hour}, 0, delivery.Retry, 3 * time.Second, false, "/fn/ answered 429"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.o, tc.earlier)
			if d.Action != tc.want || d.After != tc.after || d.Counts != tc.counts || !strings.HasPrefix(d.Reason, tc.reason) {
				t.Errorf("Decide(%+v, %d) = %+v (%v), want %v after %v, counts %v, reason %q…", tc.o, tc.earlier, d, d.Action, tc.want, tc.after, tc.counts, tc.reason)
			}
		})
	}
}

// The waits double from Backoff up to MaxBackoff; zero fields take the defaults.
func TestBackoff(t *testing.T) {
	p := delivery.Policy{MaxRetries: 10, Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	var got []time.Duration
	for n := range 6 {
		got = append(got, p.Decide(delivery.Outcome{Status: 500, FromFunction: true}, n).After)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	def := delivery.Policy{MaxRetries: 100}
	if d := def.Decide(delivery.Outcome{Err: errors.New("lost")}, 0); d.After != delivery.DefaultBackoff {
		t.Errorf("zero policy's first wait %v", d.After)
	}
	if d := def.Decide(delivery.Outcome{Err: errors.New("lost")}, 50); d.After != delivery.DefaultMaxBackoff {
		t.Errorf("zero policy's 51st wait %v, want the cap", d.After)
	}
	if d := (delivery.Policy{}).Decide(delivery.Outcome{Status: 500, FromFunction: true}, 0); d.Action != delivery.DeadLetter {
		t.Errorf("MaxRetries 0: %v, want dead-lettered after the first attempt", d.Action)
	}
}

// An event that meets only failures is dead-lettered after exactly MaxRetries+1 counted attempts,
// however much back-pressure comes between them.
func TestAttemptsEndInADeadLetter(t *testing.T) {
	p := delivery.Policy{MaxRetries: 5}
	counted, calls := 0, 0
	for calls = 1; calls < 100; calls++ {
		o := delivery.Outcome{Status: 500, FromFunction: true}
		if calls%3 == 0 {
			o = delivery.Outcome{Status: 429}
		}
		d := p.Decide(o, counted)
		if d.Counts {
			counted++
		}
		if d.Action == delivery.DeadLetter {
			break
		}
	}
	if counted != 6 {
		t.Errorf("dead-lettered after %d counted attempts (%d calls), want 6", counted, calls)
	}
}
