package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/objects"
)

// AsyncQueue is objects.AsyncQueue in PostgreSQL (the table async_events): the Kubernetes
// backend's queue of asynchronous invocations, shared by every API replica. Claim takes due rows
// with FOR UPDATE SKIP LOCKED, so replicas claiming at once each take different events; Enqueue
// and Redrive lock the function's row in async_depth (its pending events, counted by a trigger)
// until they commit, so that its depth quota holds between replicas. It lives on its store's pool
// and schema (Invocations.AsyncQueue): while PostgreSQL is away or the schema not migrated yet,
// every method answers *objects.NotReadyError within the store's query timeout.
type AsyncQueue struct {
	db      *database
	timeout time.Duration
}

var _ objects.AsyncQueue = (*AsyncQueue)(nil)

// AsyncQueue returns the asynchronous invocations' queue in the store's database: the same pool,
// connection loop and migrations, closed by the store's Close. Calls bounded by WithQueryTimeout.
func (s *Invocations) AsyncQueue() *AsyncQueue {
	return &AsyncQueue{db: s.database, timeout: s.o.queryTimeout}
}

// The states that count against a function's depth and that Claim takes from.
const pendingStates = `('queued', 'failed', 'running')`

const eventColumns = `id, namespace, function, state, created, enqueued, redriven, next_attempt, lease, lease_until,
	counted, error, attempts, method, path, header, body`

// lockDepth makes (if need be) and locks ns/name's row in async_depth until the transaction ends,
// and returns its pending events: a no-op upsert locks and reads in one statement, and waits for
// another transaction holding the row, so that it reads what that one committed.
const lockDepth = `INSERT INTO async_depth AS d VALUES ($1, $2, 0)
	ON CONFLICT (namespace, function) DO UPDATE SET pending = d.pending RETURNING pending`

// Enqueue implements objects.AsyncQueue.
func (q *AsyncQueue) Enqueue(ctx context.Context, ev objects.AsyncEvent, maxQueued int) error {
	ev.State = apiv1.AsyncQueued
	attempts, header, err := encode(ev)
	if err != nil {
		return fmt.Errorf("enqueueing asynchronous invocation %s: %w", ev.ID, err)
	}
	return q.run(ctx, "enqueueing asynchronous invocation "+ev.ID, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, q.db.pool, func(tx pgx.Tx) error {
			var n int
			if err := tx.QueryRow(ctx, lockDepth, ev.Namespace, ev.Function).Scan(&n); err != nil {
				return err
			}
			exists := fmt.Errorf("asynchronous invocation %s: %w", ev.ID, objects.ErrAlreadyExists)
			if n >= maxQueued {
				// Refused either way; which answer, as MemQueue gives it.
				var dup bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM async_events WHERE id = $1)`, ev.ID).Scan(&dup); err != nil {
					return err
				}
				if dup {
					return exists
				}
				return objects.ErrQueueFull
			}
			tag, err := tx.Exec(ctx, `INSERT INTO async_events (id, namespace, function, state, created, enqueued, redriven,
				next_attempt, lease, lease_until, finished, counted, error, attempts, method, path, header, body)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
				ON CONFLICT (id) DO NOTHING`,
				ev.ID, ev.Namespace, ev.Function, string(ev.State), ev.Created, ev.Enqueued, tz(ev.Redriven),
				tz(ev.NextAttempt), ev.Lease, tz(ev.LeaseUntil), async.Finished(ev), ev.Counted, ev.Error, attempts,
				ev.Request.Method, ev.Request.Path, header, ev.Request.Body)
			if err == nil && tag.RowsAffected() == 0 {
				return exists
			}
			return err
		})
	})
}

// Claim implements objects.AsyncQueue.
func (q *AsyncQueue) Claim(ctx context.Context, now time.Time, lease time.Duration, n int) ([]objects.AsyncEvent, time.Time, error) {
	type claim struct {
		ev  objects.AsyncEvent
		due time.Time
	}
	var claimed []claim
	var next pgtype.Timestamptz
	err := q.run(ctx, "claiming asynchronous invocations", func(ctx context.Context) error {
		claimed, next = nil, pgtype.Timestamptz{}
		return pgx.BeginFunc(ctx, q.db.pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `WITH due AS (
					SELECT id, due FROM async_events
					WHERE state IN `+pendingStates+` AND due <= $1
					ORDER BY due, id LIMIT $2
					FOR UPDATE SKIP LOCKED)
				UPDATE async_events e SET state = 'running', lease = replace(gen_random_uuid()::text, '-', ''), lease_until = $3
				FROM due WHERE e.id = due.id
				RETURNING `+prefixed("e.", eventColumns)+`, due.due`,
				now, max(n, 0), now.Add(lease))
			if err != nil {
				return err
			}
			claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (claim, error) {
				var c claim
				var err error
				c.ev, err = scanEvent(r, &c.due)
				return c, err
			})
			if err != nil {
				return err
			}
			// After the update, in the same transaction: what is left, this claim's leases included.
			return tx.QueryRow(ctx, `SELECT min(due) FROM async_events WHERE state IN `+pendingStates).Scan(&next)
		})
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	slices.SortFunc(claimed, func(a, b claim) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.ev.ID, b.ev.ID)) })
	out := make([]objects.AsyncEvent, len(claimed))
	for i, c := range claimed {
		out[i] = c.ev
	}
	return out, fromTZ(next), nil
}

// Extend implements objects.AsyncQueue.
func (q *AsyncQueue) Extend(ctx context.Context, ev objects.AsyncEvent, until time.Time) error {
	return q.run(ctx, "extending the lease of asynchronous invocation "+ev.ID, func(ctx context.Context) error {
		tag, err := q.db.pool.Exec(ctx, `UPDATE async_events SET lease_until = $3
			WHERE id = $1 AND state = 'running' AND lease = $2 AND lease <> ''`, ev.ID, ev.Lease, until)
		if err == nil && tag.RowsAffected() == 0 {
			err = lost(ev.ID)
		}
		return err
	})
}

// Settle implements objects.AsyncQueue.
func (q *AsyncQueue) Settle(ctx context.Context, ev objects.AsyncEvent) error {
	attempts, _, err := encode(ev)
	if err != nil {
		return fmt.Errorf("settling asynchronous invocation %s: %w", ev.ID, err)
	}
	var last pgtype.Timestamptz // finished: the last attempt's time, else (NULL) when it was enqueued
	if n := len(ev.Attempts); n > 0 {
		last = pgtype.Timestamptz{Time: ev.Attempts[n-1].Time, Valid: true}
	}
	return q.run(ctx, "settling asynchronous invocation "+ev.ID, func(ctx context.Context) error {
		tag, err := q.db.pool.Exec(ctx, `UPDATE async_events SET state = $3, attempts = $4, counted = $5, error = $6,
				next_attempt = $7, finished = COALESCE($8, enqueued), lease = '', lease_until = NULL
			WHERE id = $1 AND state = 'running' AND lease = $2 AND lease <> ''`,
			ev.ID, ev.Lease, string(ev.State), attempts, ev.Counted, ev.Error, tz(ev.NextAttempt), last)
		if err == nil && tag.RowsAffected() == 0 {
			err = lost(ev.ID)
		}
		return err
	})
}

func lost(id string) error {
	return fmt.Errorf("asynchronous invocation %s is not held under this lease any more: %w", id, objects.ErrConflict)
}

// Get implements objects.AsyncQueue.
func (q *AsyncQueue) Get(ctx context.Context, ns, name, id string) (objects.AsyncEvent, error) {
	var ev objects.AsyncEvent
	err := q.run(ctx, "reading asynchronous invocation "+id, func(ctx context.Context) error {
		var err error
		ev, err = scanEvent(q.db.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM async_events
			WHERE id = $1 AND namespace = $2 AND function = $3`, id, ns, name), nil)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("asynchronous invocation %s: %w", id, objects.ErrNotFound)
		}
		return err
	})
	return ev, err
}

// DeadLetters implements objects.AsyncQueue.
func (q *AsyncQueue) DeadLetters(ctx context.Context, ns, name string, limit int) ([]objects.AsyncEvent, error) {
	var out []objects.AsyncEvent
	err := q.run(ctx, fmt.Sprintf("listing the dead letters of %s/%s", ns, name), func(ctx context.Context) error {
		rows, err := q.db.pool.Query(ctx, `SELECT `+eventColumns+` FROM async_events
			WHERE namespace = $1 AND function = $2 AND state = 'dead_lettered'
			ORDER BY id DESC LIMIT $3`, ns, name, max(limit, 0))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (objects.AsyncEvent, error) { return scanEvent(r, nil) })
		return err
	})
	return out, err
}

// Redrive implements objects.AsyncQueue.
func (q *AsyncQueue) Redrive(ctx context.Context, ns, name, id string, now time.Time, maxQueued int) (objects.AsyncEvent, error) {
	now = now.UTC().Truncate(time.Microsecond) // as stored
	var ev objects.AsyncEvent
	err := q.run(ctx, "redriving asynchronous invocation "+id, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, q.db.pool, func(tx pgx.Tx) error {
			// The event first, then the function's count: the order of Settle and Forget (whose
			// trigger counts), so that none of them waits on another in a cycle.
			cur, err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM async_events
				WHERE id = $1 AND namespace = $2 AND function = $3 FOR UPDATE`, id, ns, name), nil)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("asynchronous invocation %s: %w", id, objects.ErrNotFound)
			}
			if err != nil {
				return err
			}
			if cur.State != apiv1.AsyncDeadLettered {
				return fmt.Errorf("asynchronous invocation %s is %s, not dead_lettered: %w", id, cur.State, objects.ErrConflict)
			}
			var n int
			if err := tx.QueryRow(ctx, lockDepth, ns, name).Scan(&n); err != nil {
				return err
			}
			if n >= maxQueued {
				return objects.ErrQueueFull
			}
			ev = async.Redriven(cur, now)
			_, err = tx.Exec(ctx, `UPDATE async_events SET state = $2, next_attempt = $3, counted = $4, enqueued = $5,
				redriven = $6, lease = '', lease_until = NULL WHERE id = $1`,
				id, string(ev.State), ev.NextAttempt, ev.Counted, ev.Enqueued, ev.Redriven)
			return err
		})
	})
	if err != nil {
		return objects.AsyncEvent{}, err
	}
	return ev, nil
}

// Forget implements objects.AsyncQueue.
func (q *AsyncQueue) Forget(ctx context.Context, ns, name string) error {
	return q.runBatches(ctx, fmt.Sprintf("deleting the asynchronous invocations of %s/%s", ns, name), func(ctx context.Context) error {
		if _, err := q.db.deleteBatches(ctx, q.timeout, `DELETE FROM async_events WHERE id IN (SELECT id FROM async_events
			WHERE namespace = $1 AND function = $2 LIMIT $3)`, ns, name, deleteBatch); err != nil {
			return err
		}
		// Its count, now 0 unless a new function of the name has enqueued since.
		qctx, cancel := context.WithTimeout(ctx, q.timeout)
		defer cancel()
		_, err := q.db.pool.Exec(qctx, `DELETE FROM async_depth WHERE namespace = $1 AND function = $2 AND pending = 0`, ns, name)
		return err
	})
}

// Purge implements objects.AsyncQueue.
func (q *AsyncQueue) Purge(ctx context.Context, succeeded, dead time.Time) (int, error) {
	var n int64
	err := q.runBatches(ctx, "purging asynchronous invocations", func(ctx context.Context) error {
		var err error
		n, err = q.db.deleteBatches(ctx, q.timeout, `DELETE FROM async_events WHERE id IN (SELECT id FROM async_events
			WHERE state IN ('succeeded', 'dead_lettered')
				AND (state = 'succeeded' AND finished < $1 OR state = 'dead_lettered' AND finished < $2)
			LIMIT $3)`, succeeded, dead, deleteBatch)
		return err
	})
	return int(n), err
}

// Stats implements objects.AsyncQueue.
func (q *AsyncQueue) Stats(ctx context.Context) ([]objects.AsyncStats, error) {
	var out []objects.AsyncStats
	err := q.run(ctx, "counting asynchronous invocations", func(ctx context.Context) error {
		// Depths from the trigger's counts, each oldest from the front of its function's pending
		// index: no scan of every pending event.
		rows, err := q.db.pool.Query(ctx, `WITH
				depth AS (SELECT namespace, function, pending FROM async_depth WHERE pending > 0),
				dead AS (SELECT namespace, function, count(*) AS n FROM async_events
					WHERE state = 'dead_lettered' GROUP BY namespace, function),
				fns AS (SELECT namespace, function FROM depth UNION SELECT namespace, function FROM dead)
			SELECT f.namespace, f.function, coalesce(depth.pending, 0),
				(SELECT min(e.enqueued) FROM async_events e
					WHERE e.namespace = f.namespace AND e.function = f.function AND e.state IN `+pendingStates+`),
				coalesce(dead.n, 0)
			FROM fns f LEFT JOIN depth USING (namespace, function) LEFT JOIN dead USING (namespace, function)
			ORDER BY f.namespace COLLATE "C", f.function COLLATE "C"`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (objects.AsyncStats, error) {
			var s objects.AsyncStats
			var oldest pgtype.Timestamptz
			err := r.Scan(&s.Namespace, &s.Function, &s.Depth, &oldest, &s.DeadLetters)
			s.Oldest = fromTZ(oldest)
			return s, err
		})
		return err
	})
	if out == nil && err == nil {
		out = []objects.AsyncStats{}
	}
	return out, err
}

// run calls f within the query timeout, once the schema is migrated. What PostgreSQL's absence
// causes (no connection, no answer in time, no table yet) becomes *objects.NotReadyError without
// the password; the queue's own answers (ErrQueueFull, ErrConflict, ErrNotFound…) pass through.
func (q *AsyncQueue) run(ctx context.Context, what string, f func(context.Context) error) error {
	return q.runWithin(ctx, q.timeout, what, f)
}

// runBatches is run for deletions in batches (Forget, Purge): each statement has the query
// timeout (deleteBatches), not the whole, which may be 100,000 events and 14 days of dead letters.
func (q *AsyncQueue) runBatches(ctx context.Context, what string, f func(context.Context) error) error {
	return q.runWithin(ctx, 0, what, f)
}

// runWithin calls f within timeout (0: only ctx's), once the schema is migrated.
func (q *AsyncQueue) runWithin(ctx context.Context, timeout time.Duration, what string, f func(context.Context) error) error {
	select {
	case <-q.db.ready:
	default:
		return q.db.notReady(queue, q.db.reason())
	}
	qctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := f(qctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, objects.ErrQueueFull), errors.Is(err, objects.ErrConflict), errors.Is(err, objects.ErrNotFound),
		errors.Is(err, objects.ErrAlreadyExists):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case unavailable(err):
		return q.db.notReady(queue, fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %s", what, q.db.redact(err.Error()))
}

// encode makes the jsonb of an event's attempts and request header.
func encode(ev objects.AsyncEvent) (attempts, header []byte, err error) {
	a := ev.Attempts
	if a == nil {
		a = []apiv1.AsyncAttempt{}
	}
	if attempts, err = json.Marshal(a); err != nil {
		return nil, nil, err
	}
	if ev.Request.Header != nil {
		if header, err = json.Marshal(ev.Request.Header); err != nil {
			return nil, nil, err
		}
	}
	return attempts, header, nil
}

// scanEvent reads a row of eventColumns, and into due the column after them if due is not nil.
func scanEvent(r pgx.Row, due *time.Time) (objects.AsyncEvent, error) {
	var ev objects.AsyncEvent
	var state string
	var redriven, next, leaseUntil pgtype.Timestamptz
	var attempts, header []byte
	dest := []any{&ev.ID, &ev.Namespace, &ev.Function, &state, &ev.Created, &ev.Enqueued, &redriven, &next, &ev.Lease, &leaseUntil,
		&ev.Counted, &ev.Error, &attempts, &ev.Request.Method, &ev.Request.Path, &header, &ev.Request.Body}
	var d pgtype.Timestamptz
	if due != nil {
		dest = append(dest, &d)
	}
	if err := r.Scan(dest...); err != nil {
		return objects.AsyncEvent{}, err
	}
	if due != nil {
		*due = fromTZ(d)
	}
	ev.State = apiv1.AsyncState(state)
	ev.Created, ev.Enqueued = ev.Created.UTC(), ev.Enqueued.UTC()
	ev.Redriven, ev.NextAttempt, ev.LeaseUntil = fromTZ(redriven), fromTZ(next), fromTZ(leaseUntil)
	if len(attempts) > 0 {
		if err := json.Unmarshal(attempts, &ev.Attempts); err != nil {
			return objects.AsyncEvent{}, fmt.Errorf("reading the attempts of %s: %w", ev.ID, err)
		}
		if len(ev.Attempts) == 0 {
			ev.Attempts = nil // as MemQueue keeps an event never tried
		}
	}
	if header != nil {
		if err := json.Unmarshal(header, &ev.Request.Header); err != nil {
			return objects.AsyncEvent{}, fmt.Errorf("reading the request header of %s: %w", ev.ID, err)
		}
	}
	return ev, nil
}

// tz is t as a nullable column: NULL for the zero time.
func tz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// fromTZ is a nullable column as a time in UTC: zero for NULL (and for -infinity).
func fromTZ(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time.UTC()
}

// prefixed qualifies each of a list of columns.
func prefixed(p, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
