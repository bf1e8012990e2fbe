package async_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/async/asynctest"
	"github.com/sless-dev/sless/objects"
)

func TestMemQueue(t *testing.T) {
	asynctest.Run(t, func(*testing.T) objects.AsyncQueue { return async.NewMemQueue(nil) })
}

// A change Persist refuses is not applied (claims are memory's alone: a restart queues again what
// was running).
func TestMemQueuePersistFailureChangesNothing(t *testing.T) {
	ctx := context.Background()
	fail := false
	var stored map[string]objects.AsyncEvent = map[string]objects.AsyncEvent{}
	q := async.NewMemQueue(func(put []objects.AsyncEvent, del []string) error {
		if fail {
			return errors.New("disk full")
		}
		for _, ev := range put {
			stored[ev.ID] = ev
		}
		for _, id := range del {
			delete(stored, id)
		}
		return nil
	})
	now := time.Now()
	ev := asynctest.Event("a", "f", now)
	if err := q.Enqueue(ctx, ev, 10); err != nil {
		t.Fatal(err)
	}
	fail = true
	if err := q.Enqueue(ctx, asynctest.Event("a", "f", now), 10); err == nil {
		t.Fatal("enqueue with a failing disk succeeded")
	}
	// A claim is memory's alone; its settle is refused with the disk and leaves the event running.
	claimed, _, err := q.Claim(ctx, now, time.Minute, 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != ev.ID {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	done := claimed[0]
	done.State = apiv1.AsyncSucceeded
	if err := q.Settle(ctx, done); err == nil {
		t.Fatal("settle with a failing disk succeeded")
	}
	if got, _ := q.Get(ctx, "a", "f", ev.ID); got.State != apiv1.AsyncRunning {
		t.Fatalf("after a refused settle: %+v", got)
	}
	fail = false
	if stored[ev.ID].State != apiv1.AsyncQueued || len(stored) != 1 {
		t.Fatalf("stored %+v: want the event as enqueued, the claim not written", stored)
	}

	// What was running when the process went is queued again at the next start.
	q2 := async.NewMemQueue(nil)
	var evs []objects.AsyncEvent
	for _, e := range stored {
		evs = append(evs, e)
	}
	later := now.Add(time.Minute)
	q2.Load(evs, later)
	claimed, _, err = q2.Claim(ctx, later, time.Minute, 10)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim after a restart: %+v %v", claimed, err)
	}
}
