package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/pgstore"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/async/asynctest"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/objects"
)

// truncate empties the queue's tables, straight in PostgreSQL (TRUNCATE fires no row trigger: the
// counts go too).
func truncate(t testing.TB, pg *testenv.Postgres) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `TRUNCATE async_events, async_depth`); err != nil {
		t.Fatal(err)
	}
}

// checkDepth compares the trigger's counts (async_depth) with the pending events there are.
func checkDepth(t testing.TB, pg *testenv.Postgres) {
	t.Helper()
	var wrong []string
	query(t, pg, func(c *pgx.Conn) error {
		rows, err := c.Query(context.Background(), `SELECT namespace, function, coalesce(d.pending, 0), coalesce(e.n, 0)
			FROM async_depth d FULL JOIN (SELECT namespace, function, count(*) AS n FROM async_events
				WHERE state IN ('queued', 'failed', 'running') GROUP BY namespace, function) e USING (namespace, function)
			WHERE coalesce(d.pending, 0) <> coalesce(e.n, 0)`)
		if err != nil {
			return err
		}
		var ns, fn string
		var counted, there int
		_, err = pgx.ForEachRow(rows, []any{&ns, &fn, &counted, &there}, func() error {
			wrong = append(wrong, fmt.Sprintf("%s/%s: %d counted, %d pending", ns, fn, counted, there))
			return nil
		})
		return err
	})
	if len(wrong) > 0 {
		t.Errorf("async_depth is wrong: %v", wrong)
	}
}

// The contract every queue passes, each subtest on an empty table; after each, the trigger's
// counts match the events.
func TestAsyncQueueContract(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	q := open(t, pg).AsyncQueue()
	asynctest.Run(t, func(t *testing.T) objects.AsyncQueue {
		truncate(t, pg)
		t.Cleanup(func() { checkDepth(t, pg) })
		return q
	})
}

// Stats gives each function with pending events or dead letters its depth, its oldest pending
// event's Enqueued and its dead letters, as MemQueue does for the same calls.
func TestAsyncStats(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var got [2][]objects.AsyncStats
	for i, q := range []objects.AsyncQueue{async.NewMemQueue(nil), open(t, pg).AsyncQueue()} {
		for _, ev := range []objects.AsyncEvent{
			asynctest.Event("a", "f", now.Add(2*time.Second)), asynctest.Event("a", "f", now.Add(time.Second)),
			asynctest.Event("a", "f", now), asynctest.Event("b", "g", now.Add(3*time.Second)),
		} {
			if err := q.Enqueue(ctx, ev, 10); err != nil {
				t.Fatal(err)
			}
		}
		// a/f's oldest and b/g's only event dead-lettered: a/f keeps two pending, b/g none.
		claimed, _, err := q.Claim(ctx, now.Add(time.Hour), time.Minute, 10)
		if err != nil || len(claimed) != 4 {
			t.Fatalf("claim: %+v %v", claimed, err)
		}
		for _, c := range claimed {
			switch {
			case c.Namespace == "b" || c.Enqueued.Equal(now):
				c.State = apiv1.AsyncDeadLettered
			default:
				c.State, c.NextAttempt = apiv1.AsyncFailed, now.Add(time.Hour)
			}
			if err := q.Settle(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		if got[i], err = q.Stats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []objects.AsyncStats{
		{Namespace: "a", Function: "f", Depth: 2, Oldest: now.Add(time.Second), DeadLetters: 1},
		{Namespace: "b", Function: "g", DeadLetters: 1},
	}
	for i, name := range []string{"MemQueue", "PostgreSQL"} {
		if fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Errorf("%s's stats:\n%+v\nwant\n%+v", name, got[i], want)
		}
	}
	checkDepth(t, pg)
}

// Two replicas (two stores, two pools) claiming 1,000 events at once take each exactly once.
func TestAsyncReplicasClaimEachOnce(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	replicas := []*pgstore.AsyncQueue{open(t, pg).AsyncQueue(), open(t, pg).AsyncQueue()}
	ctx := context.Background()
	now := time.Now().UTC()
	const n = 1000
	for i := range n {
		if err := replicas[i%2].Enqueue(ctx, asynctest.Event("ns", fmt.Sprint("f", i%5), now), n); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var settled atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute)
	for _, q := range replicas {
		for range 3 { // each replica's dispatcher claims from a few goroutines
			wg.Go(func() {
				for settled.Load() < n && time.Now().Before(deadline) {
					claimed, _, err := q.Claim(ctx, time.Now(), time.Minute, 10)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, c := range claimed {
						seen[c.ID]++
					}
					mu.Unlock()
					for _, c := range claimed {
						c.State = apiv1.AsyncSucceeded
						c.Attempts = []apiv1.AsyncAttempt{{Time: time.Now(), Status: 200}}
						if err := q.Settle(ctx, c); err != nil {
							t.Error(err)
						}
						settled.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d events claimed", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s claimed %d times", id, k)
		}
	}
	st, err := replicas[0].Stats(ctx)
	if err != nil || len(st) != 0 {
		t.Errorf("pending after all settled: %+v %v", st, err)
	}
	checkDepth(t, pg)
}

// Enqueues from two replicas at once never take a function beyond its quota, and a redrive
// counts against it too.
func TestAsyncDepthQuotaAcrossReplicas(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	replicas := []*pgstore.AsyncQueue{open(t, pg).AsyncQueue(), open(t, pg).AsyncQueue()}
	ctx := context.Background()
	now := time.Now().UTC()
	const quota, tries = 50, 200
	var accepted, full atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		q := replicas[w%2]
		wg.Go(func() {
			for range tries / 8 {
				switch err := q.Enqueue(ctx, asynctest.Event("ns", "f", now), quota); {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, objects.ErrQueueFull):
					full.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if accepted.Load() != quota || full.Load() != tries-quota {
		t.Errorf("accepted %d, refused full %d; want %d and %d", accepted.Load(), full.Load(), quota, tries-quota)
	}
	var stored int
	query(t, pg, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT count(*) FROM async_events WHERE namespace = 'ns' AND function = 'f'`).Scan(&stored)
	})
	if stored != quota {
		t.Errorf("%d events stored, quota %d", stored, quota)
	}

	// One dead-lettered: a place frees up, which one enqueue and one redrive race for.
	claimed, _, err := replicas[0].Claim(ctx, now, time.Minute, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	d := claimed[0]
	d.State, d.Error = apiv1.AsyncDeadLettered, "the function answered 400"
	if err := replicas[0].Settle(ctx, d); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = replicas[0].Enqueue(ctx, asynctest.Event("ns", "f", now), quota) })
	wg.Go(func() { _, errs[1] = replicas[1].Redrive(ctx, "ns", "f", d.ID, now, quota) })
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), objects.ErrQueueFull) {
		t.Errorf("enqueue %v, redrive %v: want one of them ErrQueueFull", errs[0], errs[1])
	}
	if st, err := replicas[1].Stats(ctx); err != nil || len(st) != 1 || st[0].Depth != quota {
		t.Errorf("stats %+v %v, want a depth of %d", st, err, quota)
	}
	checkDepth(t, pg)
	if err := replicas[0].Forget(ctx, "ns", "f"); err != nil {
		t.Fatal(err)
	}
	checkDepth(t, pg)
}

// notReady checks err is a NotReadyError of the queue without the password.
func notReady(t *testing.T, what string, err error, password string) {
	t.Helper()
	var nr *objects.NotReadyError
	if !errors.As(err, &nr) || !strings.HasPrefix(nr.Reason, "the asynchronous queue is unavailable: ") {
		t.Errorf("%s: %v, want a NotReadyError of the queue", what, err)
	} else if strings.Contains(err.Error(), password) {
		t.Errorf("%s: the password in %v", what, err)
	}
}

// every calls each method of q and hands each one's error to check.
func every(q objects.AsyncQueue, check func(method string, err error, took time.Duration)) {
	ctx := context.Background()
	now := time.Now().UTC()
	ev := asynctest.Event("ns", "f", now)
	held := ev
	held.Lease = "0123456789abcdef"
	calls := []struct {
		name string
		f    func() error
	}{
		{"Enqueue", func() error { return q.Enqueue(ctx, ev, 10) }},
		{"Claim", func() error { _, _, err := q.Claim(ctx, now, time.Minute, 10); return err }},
		{"Extend", func() error { return q.Extend(ctx, held, now.Add(time.Hour)) }},
		{"Settle", func() error { return q.Settle(ctx, held) }},
		{"Get", func() error { _, err := q.Get(ctx, "ns", "f", ev.ID); return err }},
		{"DeadLetters", func() error { _, err := q.DeadLetters(ctx, "ns", "f", 10); return err }},
		{"Redrive", func() error { _, err := q.Redrive(ctx, "ns", "f", ev.ID, now, 10); return err }},
		{"Forget", func() error { return q.Forget(ctx, "ns", "gone") }},
		{"Purge", func() error { _, err := q.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour)); return err }},
		{"Stats", func() error { _, err := q.Stats(ctx); return err }},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.f()
		check(c.name, err, time.Since(start))
	}
}

// PostgreSQL stopped under a running queue: every method answers NotReadyError at once, without
// the password; once it is back, the queue works again with what it held.
func TestAsyncDatabaseAway(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	q := open(t, pg, pgstore.WithMaxBackoff(200*time.Millisecond)).AsyncQueue()
	ctx := context.Background()
	now := time.Now().UTC()
	kept := asynctest.Event("ns", "f", now)
	if err := q.Enqueue(ctx, kept, 10); err != nil {
		t.Fatal(err)
	}

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	every(q, func(method string, err error, took time.Duration) {
		notReady(t, method+" while PostgreSQL is stopped", err, pg.Password)
		if took > 3*time.Second {
			t.Errorf("%s took %v while PostgreSQL was stopped", method, took)
		}
	})

	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue to answer again", func() bool { _, err := q.Stats(ctx); return err == nil })
	claimed, _, err := q.Claim(ctx, now, time.Minute, 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != kept.ID {
		t.Fatalf("claim after the return: %+v %v", claimed, err)
	}
	if err := q.Settle(ctx, withState(claimed[0], apiv1.AsyncSucceeded)); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, asynctest.Event("ns", "f", now), 10); err != nil {
		t.Fatal(err)
	}
}

// PostgreSQL that stops answering (connections open, no bytes back): every method gives up
// within the query timeout with NotReadyError.
func TestAsyncDatabaseHangs(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	proxy := newHangingProxy(t, net.JoinHostPort(pg.Host, fmt.Sprint(pg.Port)))
	u, _ := url.Parse(pg.URL)
	u.Host = proxy.addr
	const timeout = 500 * time.Millisecond
	q := open(t, &testenv.Postgres{URL: u.String()}, pgstore.WithQueryTimeout(timeout)).AsyncQueue()
	ctx := context.Background()
	if err := q.Enqueue(ctx, asynctest.Event("ns", "f", time.Now()), 10); err != nil {
		t.Fatal(err)
	}
	proxy.freeze()
	every(q, func(method string, err error, took time.Duration) {
		notReady(t, method+" while PostgreSQL hangs", err, pg.Password)
		if took > timeout+time.Second {
			t.Errorf("%s took %v while PostgreSQL hung (query timeout %v)", method, took, timeout)
		}
	})
	proxy.unfreeze()
	waitFor(t, "the queue to answer again", func() bool { _, err := q.Stats(ctx); return err == nil })
}

// A queue whose store has not reached PostgreSQL yet answers NotReadyError at once.
func TestAsyncBeforeConnecting(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.Open(context.Background(), pg.URL, pgstore.WithMaxBackoff(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	every(s.AsyncQueue(), func(method string, err error, took time.Duration) {
		notReady(t, method+" before connecting", err, pg.Password)
		if took > 100*time.Millisecond {
			t.Errorf("%s took %v before connecting", method, took)
		}
	})
}

func withState(ev objects.AsyncEvent, s apiv1.AsyncState) objects.AsyncEvent {
	ev.State = s
	return ev
}

// BenchmarkAsyncEnqueue: one event per op, its quota checked under the function's lock. serial:
// one caller, ten functions; parallel: GOMAXPROCS callers each on a function of its own; deep: one
// caller into a function with 10,000 events pending (the depth count's worst case at the default
// quota).
func BenchmarkAsyncEnqueue(b *testing.B) {
	if testing.Short() {
		b.Skip("starts PostgreSQL and fills a queue")
	}
	pg := testenv.PostgreSQL(b)
	q := open(b, pg).AsyncQueue()
	ctx := context.Background()
	now := time.Now().UTC()
	b.Run("serial", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := q.Enqueue(ctx, asynctest.Event("serial", fmt.Sprint("f", i%10), now), apiv1.MaxAsyncMaxQueued); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var callers atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			fn := fmt.Sprint("f", callers.Add(1))
			for pb.Next() {
				if err := q.Enqueue(ctx, asynctest.Event("parallel", fn, now), apiv1.MaxAsyncMaxQueued); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("deep", func(b *testing.B) {
		for range 10_000 {
			if err := q.Enqueue(ctx, asynctest.Event("deep", "f", now), apiv1.MaxAsyncMaxQueued); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if err := q.Enqueue(ctx, asynctest.Event("deep", "f", now), apiv1.MaxAsyncMaxQueued); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAsyncClaimSettle: one event per op claimed (in batches of 10) and settled, from a
// queue of 10,000.
func BenchmarkAsyncClaimSettle(b *testing.B) {
	if testing.Short() {
		b.Skip("starts PostgreSQL and fills a queue")
	}
	pg := testenv.PostgreSQL(b)
	q := open(b, pg).AsyncQueue()
	ctx := context.Background()
	now := time.Now().UTC()
	fill := func() {
		for i := range 10_000 {
			if err := q.Enqueue(ctx, asynctest.Event("ns", fmt.Sprint("f", i%10), now), 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	var batch []objects.AsyncEvent
	b.ResetTimer()
	for b.Loop() {
		for len(batch) == 0 {
			claimed, _, err := q.Claim(ctx, now, time.Minute, 10)
			if err != nil {
				b.Fatal(err)
			}
			if len(claimed) == 0 {
				b.StopTimer()
				fill()
				b.StartTimer()
			}
			batch = claimed
		}
		c := withState(batch[0], apiv1.AsyncSucceeded)
		c.Attempts = append(c.Attempts, apiv1.AsyncAttempt{Time: now, Status: 200})
		if err := q.Settle(ctx, c); err != nil {
			b.Fatal(err)
		}
		batch = batch[1:]
	}
}
