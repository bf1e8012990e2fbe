package async

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/objects"
)

// How a Dispatcher works: at most maxInFlight attempts at once; a claim holds for leaseFor before
// another dispatcher may take it over (extended every third of it while an attempt runs); the queue
// is looked at every pollEvery without a Wake (another replica's enqueue).
const (
	maxInFlight = 32
	leaseFor    = time.Minute
	pollEvery   = time.Second
	// SucceededRetention and DeadLetterRetention: how long done events stay readable (GET …/async/
	// {id}, the dead letters) before Purge drops them.
	SucceededRetention  = 24 * time.Hour
	DeadLetterRetention = 14 * 24 * time.Hour
	purgeEvery          = 10 * time.Minute
)

// FunctionGetter reads a function (objects.Store, or objects.ServingView's cached Functions).
type FunctionGetter interface {
	Get(ctx context.Context, ns, name string) (objects.Function, error)
}

// Dispatcher takes due events from Queue and sends each to its function through Handler (/fn/
// for event sources: api.Server.Events), then settles it by delivery.Policy: succeeded on a 2xx,
// retried with backoff, dead-lettered. Any number of dispatchers (API replicas) may share a queue:
// each event is held under a lease its dispatcher extends while the attempt runs, and taken over
// when that lease runs out.
type Dispatcher struct {
	Queue     objects.AsyncQueue
	Functions FunctionGetter
	Handler   http.Handler
	// Events, when set, gets a Warning event for each dead letter.
	Events  delivery.EventRecorder
	Metrics *delivery.Metrics
	Logger  *slog.Logger

	once sync.Once
	wake chan struct{}
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.wake = make(chan struct{}, 1)
		if d.Logger == nil {
			d.Logger = slog.New(slog.DiscardHandler)
		}
	})
}

// Wake makes Run look at the queue now (an event was enqueued in this process).
func (d *Dispatcher) Wake() {
	d.init()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run dispatches until ctx ends, then waits for the attempts in flight (their events are settled
// or, cut short, taken again once their lease runs out).
func (d *Dispatcher) Run(ctx context.Context) error {
	d.init()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); d.purge(ctx) }()
	done := make(chan struct{}, maxInFlight)
	inflight := 0
	failures := 0
	for {
		for drained := false; !drained; {
			select {
			case <-done:
				inflight--
			default:
				drained = true
			}
		}
		now := time.Now()
		wait := pollEvery
		if free := maxInFlight - inflight; free > 0 {
			claimed, next, err := d.Queue.Claim(ctx, now, leaseFor, free)
			switch {
			case err != nil && ctx.Err() == nil:
				failures++
				d.Logger.Warn("claiming asynchronous invocations", "error", err)
				wait = min(time.Duration(failures)*time.Second, 10*time.Second)
			case err == nil:
				failures = 0
				for _, ev := range claimed {
					inflight++
					wg.Add(1)
					go func() {
						defer wg.Done()
						d.deliver(context.WithoutCancel(ctx), ev)
						done <- struct{}{}
					}()
				}
				if len(claimed) == free {
					wait = 0 // more may be due: look again once a worker is free
				} else if !next.IsZero() {
					wait = min(wait, max(next.Sub(time.Now()), time.Millisecond))
				}
			}
		}
		if wait == 0 && inflight < maxInFlight {
			continue
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-d.wake:
		case <-done:
			inflight--
		case <-t.C:
		}
		t.Stop()
	}
}

// purge drops done events past their retention every purgeEvery until ctx ends, apart from the
// claims: a long purge holds up no delivery.
func (d *Dispatcher) purge(ctx context.Context) {
	t := time.NewTicker(purgeEvery)
	defer t.Stop()
	for {
		now := time.Now()
		if n, err := d.Queue.Purge(ctx, now.Add(-SucceededRetention), now.Add(-DeadLetterRetention)); err != nil && ctx.Err() == nil {
			d.Logger.Warn("purging done asynchronous invocations", "error", err)
		} else if n > 0 {
			d.Logger.Info("purged done asynchronous invocations", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deliver makes one attempt of ev and settles it.
func (d *Dispatcher) deliver(ctx context.Context, ev objects.AsyncEvent) {
	now := time.Now()
	fn, err := d.Functions.Get(ctx, ev.Namespace, ev.Function)
	switch {
	case errors.Is(err, objects.ErrNotFound) || err == nil && fn.Deleting:
		// Deleted: its events go with it (the API's delete forgets them; this one raced it).
		d.settle(ctx, ev, delivery.Decision{Action: delivery.DeadLetter, Reason: "the function was deleted"}, nil)
		return
	case err != nil:
		// Its store is away: try again later, not counted.
		d.settle(ctx, ev, delivery.Decision{Action: delivery.Retry, After: 5 * time.Second, Reason: "reading the function: " + err.Error()}, nil)
		return
	}
	cfg := apiv1.AsyncConfig{}
	if fn.Spec.Async != nil {
		cfg = *fn.Spec.Async
	}
	cfg = cfg.WithDefaults()
	if age := now.Sub(ev.Enqueued); age > cfg.MaxAge() {
		d.settle(ctx, ev, delivery.Decision{Action: delivery.DeadLetter,
			Reason: fmt.Sprintf("not delivered within max_age_sec (%d s)", cfg.MaxAgeSec)}, nil)
		return
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := d.keepLease(actx, cancel, ev)
	start := time.Now()
	o := d.invoke(actx, ev)
	lost := stop()
	if lost {
		// Another dispatcher has it now: what this attempt got is not ours to write.
		d.Logger.Warn("asynchronous invocation taken over while delivered", "namespace", ev.Namespace, "function", ev.Function, "id", ev.ID)
		return
	}
	dec := delivery.Policy{MaxRetries: *cfg.MaxRetries}.Decide(o, ev.Counted)
	attempt := &apiv1.AsyncAttempt{Time: start.UTC(), Status: o.Status, DurationMS: float64(time.Now().Sub(start).Microseconds()) / 1000}
	if dec.Action != delivery.Ack {
		attempt.Error = dec.Reason
	}
	if dec.Action == delivery.Retry && !dec.Counts {
		attempt = nil // back-pressure of /fn/: the function was not called
	}
	if dec.Action == delivery.Retry && time.Now().Add(dec.After).Sub(ev.Enqueued) > cfg.MaxAge() {
		dec = delivery.Decision{Action: delivery.DeadLetter, Counts: dec.Counts,
			Reason: fmt.Sprintf("%s; its next retry would pass max_age_sec (%d s)", dec.Reason, cfg.MaxAgeSec)}
	}
	d.settle(ctx, ev, dec, attempt)
}

// keepLease extends ev's lease while its attempt runs; stop ends that and reports whether the
// lease was lost (then the attempt was cancelled).
func (d *Dispatcher) keepLease(ctx context.Context, cancel context.CancelFunc, ev objects.AsyncEvent) (stop func() (lost bool)) {
	var lost bool
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(leaseFor / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				err := d.Queue.Extend(ctx, ev, time.Now().Add(leaseFor))
				if errors.Is(err, objects.ErrConflict) {
					lost = true
					cancel()
					return
				}
				if err != nil {
					d.Logger.Warn("extending an asynchronous invocation's lease", "id", ev.ID, "error", err)
				}
			}
		}
	}()
	return func() bool {
		close(quit)
		<-finished
		return lost
	}
}

// settle writes what became of ev.
func (d *Dispatcher) settle(ctx context.Context, ev objects.AsyncEvent, dec delivery.Decision, attempt *apiv1.AsyncAttempt) {
	if attempt != nil {
		ev.Attempts = append(ev.Attempts, *attempt)
	}
	if dec.Counts {
		ev.Counted++
	}
	switch dec.Action {
	case delivery.Ack:
		ev.State, ev.Error = apiv1.AsyncSucceeded, ""
	case delivery.Retry:
		ev.State, ev.Error, ev.NextAttempt = apiv1.AsyncFailed, dec.Reason, time.Now().Add(dec.After)
		if attempt == nil {
			ev.State = apiv1.AsyncQueued // not tried: waiting, not failed
		}
	case delivery.DeadLetter:
		ev.State, ev.Error = apiv1.AsyncDeadLettered, dec.Reason
	}
	if err := d.Queue.Settle(ctx, ev); err != nil {
		// Lost lease (ErrConflict): another dispatcher has it; else its lease runs out and it is
		// tried again. Either way nothing is lost.
		d.Logger.Warn("settling an asynchronous invocation", "namespace", ev.Namespace, "function", ev.Function, "id", ev.ID, "error", err)
		return
	}
	if d.Metrics != nil {
		d.Metrics.Observe(apiv1.SourceAsync, dec)
	}
	if dec.Action == delivery.DeadLetter && d.Events != nil {
		msg := fmt.Sprintf("asynchronous invocation %s dead-lettered: %s", ev.ID, dec.Reason)
		if err := d.Events.Record(ctx, ev.Namespace, ev.Function, apiv1.Event{Time: time.Now().UTC(), Type: apiv1.EventWarning,
			Reason: apiv1.ReasonDeadLettered, Message: msg}); err != nil {
			d.Logger.Warn("recording a dead letter's event", "id", ev.ID, "error", err)
		}
	}
}

// invoke sends ev's request through /fn/ as the event source "async".
func (d *Dispatcher) invoke(ctx context.Context, ev objects.AsyncEvent) delivery.Outcome {
	target := "/fn/" + url.PathEscape(ev.Namespace) + "/" + url.PathEscape(ev.Function) + ev.Request.Path
	req, err := http.NewRequestWithContext(ctx, ev.Request.Method, target, bytes.NewReader(ev.Request.Body))
	if err != nil {
		return delivery.Outcome{Err: err}
	}
	req.Header = ev.Request.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set(apiv1.HeaderEventSource, apiv1.SourceAsync)
	req.Header.Set(apiv1.HeaderEventMessageID, ev.ID)
	req.Header.Set(apiv1.HeaderEventDeliveryCount, strconv.Itoa(len(ev.Attempts)+1))
	req.RemoteAddr = "127.0.0.1:0"
	var w delivery.Answer
	d.Handler.ServeHTTP(&w, req)
	if !w.Written() && ctx.Err() != nil {
		return delivery.Outcome{Err: ctx.Err()}
	}
	return w.Outcome()
}
