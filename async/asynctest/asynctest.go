package asynctest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// Event makes a queued event of ns/name created at t.
func Event(ns, name string, t time.Time) objects.AsyncEvent {
	var r [10]byte
	rand.Read(r[:])
	return objects.AsyncEvent{
		ID: apiv1.FormatAsyncID(t, r), Namespace: ns, Function: name, State: apiv1.AsyncQueued,
		Created: t, Enqueued: t, NextAttempt: t,
		Request: objects.AsyncRequest{Method: http.MethodPost, Path: "/x?y=1", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"n":1}`)},
	}
}

// Run checks q's contract; open makes an empty queue for each subtest.
func Run(t *testing.T, open func(t *testing.T) objects.AsyncQueue) {
	ctx := context.Background()
	// Times as PostgreSQL keeps them (microseconds), in UTC.
	now := time.Now().UTC().Truncate(time.Millisecond)

	t.Run("EnqueueGetClaimSettle", func(t *testing.T) {
		q := open(t)
		ev := Event("a", "f", now)
		if err := q.Enqueue(ctx, ev, 10); err != nil {
			t.Fatal(err)
		}
		got, err := q.Get(ctx, "a", "f", ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != apiv1.AsyncQueued || string(got.Request.Body) != `{"n":1}` || got.Request.Path != "/x?y=1" ||
			got.Request.Header.Get("Content-Type") != "application/json" || got.Request.Method != http.MethodPost || !got.Created.Equal(now) {
			t.Fatalf("stored %+v", got)
		}
		// Not due yet: nothing claimed, and next says when.
		claimed, next, err := q.Claim(ctx, now.Add(-time.Second), time.Minute, 10)
		if err != nil || len(claimed) != 0 || !next.Equal(now) {
			t.Fatalf("claim before due: %v %v %v", claimed, next, err)
		}
		claimed, next, err = q.Claim(ctx, now, time.Minute, 10)
		if err != nil || len(claimed) != 1 || claimed[0].ID != ev.ID || claimed[0].State != apiv1.AsyncRunning || claimed[0].Lease == "" {
			t.Fatalf("claim: %+v %v", claimed, err)
		}
		// The only event left to take is this one, once its lease runs out.
		if !next.Equal(now.Add(time.Minute)) {
			t.Fatalf("next = %v, want the lease's end %v", next, now.Add(time.Minute))
		}
		// Claimed: nobody else takes it before its lease ends.
		if again, _, err := q.Claim(ctx, now.Add(30*time.Second), time.Minute, 10); err != nil || len(again) != 0 {
			t.Fatalf("claimed twice: %+v %v", again, err)
		}
		c := claimed[0]
		c.State = apiv1.AsyncFailed
		c.Attempts = []apiv1.AsyncAttempt{{Time: now, Status: 500, DurationMS: 1.5, Error: "the function answered 500"}}
		c.Counted, c.Error, c.NextAttempt = 1, "the function answered 500", now.Add(time.Second)
		if err := q.Settle(ctx, c); err != nil {
			t.Fatal(err)
		}
		got, _ = q.Get(ctx, "a", "f", ev.ID)
		if got.State != apiv1.AsyncFailed || len(got.Attempts) != 1 || got.Attempts[0].Status != 500 || got.Counted != 1 || got.Error == "" ||
			!got.NextAttempt.Equal(now.Add(time.Second)) {
			t.Fatalf("settled %+v", got)
		}
		// The same lease cannot settle twice.
		if err := q.Settle(ctx, c); !errors.Is(err, objects.ErrConflict) {
			t.Fatalf("second settle: %v", err)
		}
		claimed, _, _ = q.Claim(ctx, now.Add(time.Second), time.Minute, 10)
		if len(claimed) != 1 || claimed[0].Lease == c.Lease {
			t.Fatalf("retry claim %+v", claimed)
		}
		c = claimed[0]
		c.State, c.Error = apiv1.AsyncSucceeded, ""
		c.Attempts = append(c.Attempts, apiv1.AsyncAttempt{Time: now.Add(time.Second), Status: 200})
		if err := q.Settle(ctx, c); err != nil {
			t.Fatal(err)
		}
		got, _ = q.Get(ctx, "a", "f", ev.ID)
		if got.State != apiv1.AsyncSucceeded || len(got.Attempts) != 2 {
			t.Fatalf("succeeded %+v", got)
		}
		if claimed, next, _ := q.Claim(ctx, now.Add(time.Hour), time.Minute, 10); len(claimed) != 0 || !next.IsZero() {
			t.Fatalf("a succeeded event claimed again: %+v %v", claimed, next)
		}
	})

	t.Run("TenantIsolation", func(t *testing.T) {
		q := open(t)
		ev := Event("a", "f", now)
		dead := ev
		if err := q.Enqueue(ctx, ev, 10); err != nil {
			t.Fatal(err)
		}
		for _, where := range [][2]string{{"b", "f"}, {"a", "g"}} {
			if _, err := q.Get(ctx, where[0], where[1], ev.ID); !errors.Is(err, objects.ErrNotFound) {
				t.Errorf("Get from %s/%s: %v, want ErrNotFound", where[0], where[1], err)
			}
			if _, err := q.Redrive(ctx, where[0], where[1], ev.ID, now, 10); !errors.Is(err, objects.ErrNotFound) {
				t.Errorf("Redrive from %s/%s: %v, want ErrNotFound", where[0], where[1], err)
			}
		}
		deadLetter(t, q, now, dead.ID)
		if l, err := q.DeadLetters(ctx, "b", "f", 10); err != nil || len(l) != 0 {
			t.Fatalf("another namespace's dead letters: %v %v", l, err)
		}
		if err := q.Forget(ctx, "b", "f"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Get(ctx, "a", "f", ev.ID); err != nil {
			t.Fatalf("Forget of b/f dropped a/f's event: %v", err)
		}
	})

	t.Run("DepthQuota", func(t *testing.T) {
		q := open(t)
		for i := range 3 {
			if err := q.Enqueue(ctx, Event("a", "f", now.Add(time.Duration(i)*time.Millisecond)), 3); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Enqueue(ctx, Event("a", "f", now), 3); !errors.Is(err, objects.ErrQueueFull) {
			t.Fatalf("fourth enqueue: %v, want ErrQueueFull", err)
		}
		// Another function's queue is its own.
		if err := q.Enqueue(ctx, Event("a", "g", now.Add(time.Hour)), 3); err != nil {
			t.Fatal(err)
		}
		// A done event no longer counts.
		claimed, _, _ := q.Claim(ctx, now.Add(time.Second), time.Minute, 1)
		c := claimed[0]
		c.State = apiv1.AsyncSucceeded
		if err := q.Settle(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(ctx, Event("a", "f", now), 3); err != nil {
			t.Fatalf("enqueue after one finished: %v", err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		depth := map[string]int{}
		for _, s := range st {
			depth[s.Namespace+"/"+s.Function] = s.Depth
			if s.Depth > 0 && s.Oldest.IsZero() {
				t.Errorf("stats %+v: no oldest", s)
			}
		}
		if depth["a/f"] != 3 || depth["a/g"] != 1 {
			t.Fatalf("stats %+v", st)
		}
	})

	t.Run("LeaseRunsOut", func(t *testing.T) {
		q := open(t)
		ev := Event("a", "f", now)
		q.Enqueue(ctx, ev, 10)
		first, _, _ := q.Claim(ctx, now, time.Minute, 10)
		if len(first) != 1 {
			t.Fatalf("claim %+v", first)
		}
		// Extended: still held at the old lease's end.
		if err := q.Extend(ctx, first[0], now.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if again, next, _ := q.Claim(ctx, now.Add(90*time.Second), time.Minute, 10); len(again) != 0 || !next.Equal(now.Add(2*time.Minute)) {
			t.Fatalf("claimed within an extended lease: %+v next %v", again, next)
		}
		// Its dispatcher went away: another takes it once the lease ran out.
		second, _, _ := q.Claim(ctx, now.Add(3*time.Minute), time.Minute, 10)
		if len(second) != 1 || second[0].Lease == first[0].Lease {
			t.Fatalf("reclaim %+v", second)
		}
		// The first one, back, cannot overwrite it nor extend it.
		done := first[0]
		done.State = apiv1.AsyncSucceeded
		if err := q.Settle(ctx, done); !errors.Is(err, objects.ErrConflict) {
			t.Fatalf("settle under a lost lease: %v", err)
		}
		if err := q.Extend(ctx, first[0], now.Add(time.Hour)); !errors.Is(err, objects.ErrConflict) {
			t.Fatalf("extend under a lost lease: %v", err)
		}
		if err := q.Settle(ctx, withState(second[0], apiv1.AsyncSucceeded)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("DeadLettersAndRedrive", func(t *testing.T) {
		q := open(t)
		var ids []string
		for i := range 3 {
			ev := Event("a", "f", now.Add(time.Duration(i)*time.Millisecond))
			q.Enqueue(ctx, ev, 10)
			ids = append(ids, ev.ID)
		}
		// Not dead-lettered: no redrive.
		if _, err := q.Redrive(ctx, "a", "f", ids[0], now, 10); !errors.Is(err, objects.ErrConflict) {
			t.Fatalf("redrive of a queued event: %v", err)
		}
		for _, id := range ids {
			deadLetter(t, q, now, id)
		}
		l, err := q.DeadLetters(ctx, "a", "f", 2)
		if err != nil || len(l) != 2 || l[0].ID != ids[2] || l[1].ID != ids[1] || l[0].Error == "" {
			t.Fatalf("dead letters (newest first, limit 2): %+v %v", l, err)
		}
		later := now.Add(time.Hour)
		ev, err := q.Redrive(ctx, "a", "f", ids[0], later, 10)
		if err != nil {
			t.Fatal(err)
		}
		if ev.State != apiv1.AsyncQueued || ev.Counted != 0 || !ev.Enqueued.Equal(later) || !ev.Redriven.Equal(later) || len(ev.Attempts) != 1 {
			t.Fatalf("redriven %+v", ev)
		}
		if l, _ := q.DeadLetters(ctx, "a", "f", 10); len(l) != 2 {
			t.Fatalf("dead letters after a redrive: %d", len(l))
		}
		claimed, _, _ := q.Claim(ctx, later, time.Minute, 10)
		if len(claimed) != 1 || claimed[0].ID != ids[0] {
			t.Fatalf("redriven event not due: %+v", claimed)
		}
		// A full queue takes no redrive.
		q.Enqueue(ctx, Event("a", "f", now), 10)
		if _, err := q.Redrive(ctx, "a", "f", ids[1], later, 2); !errors.Is(err, objects.ErrQueueFull) {
			t.Fatalf("redrive into a full queue: %v", err)
		}
	})

	t.Run("PurgeAndForget", func(t *testing.T) {
		q := open(t)
		a, b, c := Event("a", "f", now), Event("a", "f", now), Event("a", "f", now)
		for _, ev := range []objects.AsyncEvent{a, b, c} {
			q.Enqueue(ctx, ev, 10)
		}
		claimed, _, _ := q.Claim(ctx, now, time.Minute, 1)
		s := withState(claimed[0], apiv1.AsyncSucceeded)
		s.Attempts = []apiv1.AsyncAttempt{{Time: now, Status: 200}}
		q.Settle(ctx, s)
		n, err := q.Purge(ctx, now.Add(time.Second), now.Add(-time.Hour))
		if err != nil || n != 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if _, err := q.Get(ctx, "a", "f", s.ID); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("purged event still there: %v", err)
		}
		if err := q.Forget(ctx, "a", "f"); err != nil {
			t.Fatal(err)
		}
		for _, ev := range []objects.AsyncEvent{a, b, c} {
			if _, err := q.Get(ctx, "a", "f", ev.ID); !errors.Is(err, objects.ErrNotFound) {
				t.Fatalf("forgotten event %s still there: %v", ev.ID, err)
			}
		}
		if claimed, next, _ := q.Claim(ctx, now.Add(time.Hour), time.Minute, 10); len(claimed) != 0 || !next.IsZero() {
			t.Fatalf("forgotten events claimed: %+v %v", claimed, next)
		}
	})

	t.Run("ConcurrentClaimsTakeEachOnce", func(t *testing.T) {
		q := open(t)
		const n = 300
		for i := range n {
			if err := q.Enqueue(ctx, Event("a", fmt.Sprint("f", i%3), now), n); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					claimed, _, err := q.Claim(ctx, now, time.Minute, 7)
					if err != nil {
						t.Error(err)
						return
					}
					if len(claimed) == 0 {
						return
					}
					mu.Lock()
					for _, c := range claimed {
						seen[c.ID]++
					}
					mu.Unlock()
					for _, c := range claimed {
						if err := q.Settle(ctx, withState(c, apiv1.AsyncSucceeded)); err != nil {
							t.Error(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("%d of %d events claimed", len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				t.Fatalf("event %s claimed %d times", id, k)
			}
		}
	})
}

func withState(ev objects.AsyncEvent, s apiv1.AsyncState) objects.AsyncEvent {
	ev.State = s
	return ev
}

// deadLetter claims event id (due at now) and settles it dead-lettered after one attempt.
func deadLetter(t *testing.T, q objects.AsyncQueue, now time.Time, id string) {
	t.Helper()
	ctx := context.Background()
	for {
		claimed, _, err := q.Claim(ctx, now.Add(time.Millisecond*10), time.Minute, 1)
		if err != nil || len(claimed) == 0 {
			t.Fatalf("claiming %s: %v", id, err)
		}
		c := claimed[0]
		if c.ID != id {
			// Another event came first: put it back as it was, due now.
			c.State, c.NextAttempt = apiv1.AsyncQueued, now.Add(time.Hour)
			if err := q.Settle(ctx, c); err != nil {
				t.Fatal(err)
			}
			continue
		}
		c.State, c.Error, c.Counted = apiv1.AsyncDeadLettered, "the function answered 400", 1
		c.Attempts = []apiv1.AsyncAttempt{{Time: now, Status: 400, Error: c.Error}}
		if err := q.Settle(ctx, c); err != nil {
			t.Fatal(err)
		}
		return
	}
}
