package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

//go:embed migrations/*.sql
var migrations embed.FS

const (
	// deleteBatch bounds the rows one DELETE of retention or Forget removes, so that neither
	// holds locks on, or writes WAL for, millions of rows in one statement.
	deleteBatch = 10_000
	// flushTimeout bounds one COPY of a batch.
	flushTimeout = 5 * time.Second
	// connectTimeout bounds a connection attempt when the URL sets none (pgx's default is 2 min).
	connectTimeout = 5 * time.Second
	// migrateTimeout bounds connecting and migrating once (waiting on another replica's
	// migration lock included).
	migrateTimeout = time.Minute
	// readers is the weight of the lock flushes take whole and each List takes one of.
	readers = 1 << 20
)

// Invocations is objects.Invocations in PostgreSQL. Record appends to a bounded buffer; a writer
// goroutine copies the buffer into the table; List reads the table (and what is still buffered).
type Invocations struct {
	*database // shared with the asynchronous queue (AsyncQueue)
	o         *options

	// ctx ends when Close begins: loops stop, connection attempts end. hard ends when Close's
	// time is up: an in-flight write ends too.
	ctx, hard          context.Context
	cancel, hardCancel context.CancelFunc
	wg                 sync.WaitGroup
	wake               chan struct{} // a full batch is waiting
	closeOnce          sync.Once

	// rw orders writes against reads: a flush or a Forget holds it whole, a List holds a share,
	// so that a List sees each record either in the buffer or in the table, never both, and no
	// record is written between a Forget's purge of the buffer and its delete.
	rw *semaphore.Weighted

	mu                         sync.Mutex
	pending                    []row    // oldest first; the front is what a flush writes
	forgets                    []forget // deletions not done yet
	closed                     bool
	recorded, written, dropped uint64
	discarded                  uint64 // buffered records of a function Forget removed
}

type row struct {
	ns, name string
	inv      apiv1.Invocation
}

// forget is a deleted function whose rows are still to be deleted.
type forget struct{ ns, name string }

var (
	_ objects.Invocations  = (*Invocations)(nil)
	_ prometheus.Collector = (*Invocations)(nil)
)

// Open returns the store at once, whether PostgreSQL is reachable or not: a goroutine connects,
// applies the embedded migrations (goose, under its advisory lock, so replicas starting together
// migrate once) and retries with backoff until that works; until then records wait in the buffer
// and List answers *objects.NotReadyError. databaseURL is a PostgreSQL connection string (URL or
// key=value). AsyncQueue is the asynchronous invocations' queue on the same pool and schema. Close
// releases everything.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Invocations, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(databaseURL) // pgx redacts the password in its errors
	if err != nil {
		return nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("configuring the connection pool: %w", err)
	}
	s := &Invocations{
		database: newDatabase(pool, cfg.ConnConfig.Password),
		o:        o, wake: make(chan struct{}, 1), rw: semaphore.NewWeighted(readers),
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.hard, s.hardCancel = context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// Wait blocks until the store has connected and migrated the schema, or ctx ends.
func (s *Invocations) Wait(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for PostgreSQL: %w (%v)", ctx.Err(), s.reason())
	}
}

// Record buffers one invocation for the writer. It never blocks and never touches the network:
// when the buffer is full (PostgreSQL away for long, or slower than /fn/), the record is dropped
// and counted.
func (s *Invocations) Record(_ context.Context, ns, name string, inv apiv1.Invocation) {
	if inv.Time.IsZero() {
		inv.Time = time.Now()
	}
	// As the table keeps it, so that a before cursor taken from a record still buffered pages the
	// same once it is written.
	inv.Time = inv.Time.UTC().Truncate(time.Microsecond)
	s.mu.Lock()
	s.recorded++
	if s.closed || len(s.pending) >= s.o.bufferSize {
		s.dropped++
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, row{ns, name, inv})
	full := len(s.pending) >= s.o.batchSize
	s.mu.Unlock()
	if full {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// List returns up to q.Limit of a function's records strictly older than q.Before (if set),
// newest first: those in the table and those still buffered here. While PostgreSQL cannot answer
// (within the query timeout) it returns *objects.NotReadyError.
func (s *Invocations) List(ctx context.Context, ns, name string, q objects.InvocationQuery) ([]apiv1.Invocation, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = objects.DefaultInvocationLimit
	}
	select {
	case <-s.ready:
	default:
		return nil, s.notReady(history, s.reason())
	}
	qctx, cancel := context.WithTimeout(ctx, s.o.queryTimeout)
	defer cancel()
	if err := s.rw.Acquire(qctx, 1); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.notReady(history, fmt.Errorf("a write to PostgreSQL did not finish within %v", s.o.queryTimeout))
	}
	defer s.rw.Release(1)

	before := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	if !q.Before.IsZero() {
		before = pgtype.Timestamptz{Time: q.Before, Valid: true}
	}
	var out []apiv1.Invocation
	s.mu.Lock()
	for _, r := range s.pending {
		if r.ns == ns && r.name == name && (q.Before.IsZero() || r.inv.Time.Before(q.Before)) {
			out = append(out, r.inv)
		}
	}
	s.mu.Unlock()

	rows, err := s.pool.Query(qctx, `SELECT time, status, duration_ms, request_id, source, message_id FROM invocations
		WHERE namespace = $1 AND function = $2 AND time < $3
		ORDER BY time DESC, id DESC LIMIT $4`, ns, name, before, limit)
	if err == nil {
		var inv apiv1.Invocation
		_, err = pgx.ForEachRow(rows, []any{&inv.Time, &inv.Status, &inv.DurationMS, &inv.RequestID, &inv.Source, &inv.MessageID}, func() error {
			inv.Time = inv.Time.UTC()
			out = append(out, inv)
			return nil
		})
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !unavailable(err) {
			return nil, fmt.Errorf("listing the invocations of %s/%s: %w", ns, name, err)
		}
		return nil, s.notReady(history, err)
	}
	slices.SortStableFunc(out, func(a, b apiv1.Invocation) int { return b.Time.Compare(a.Time) })
	return out[:min(limit, len(out))], nil
}

// Forget drops a deleted function's records: those buffered at once, those in the table now if
// PostgreSQL answers within the query timeout, else as soon as it does (the writer deletes them
// before it writes anything newer, so a function created again under the name keeps its own).
func (s *Invocations) Forget(ctx context.Context, ns, name string) error {
	if err := s.rw.Acquire(ctx, readers); err != nil {
		return err
	}
	defer s.rw.Release(readers)
	s.mu.Lock()
	n := len(s.pending)
	s.pending = slices.DeleteFunc(s.pending, func(r row) bool { return r.ns == ns && r.name == name })
	s.discarded += uint64(n - len(s.pending))
	if !slices.Contains(s.forgets, forget{ns, name}) {
		s.forgets = append(s.forgets, forget{ns, name})
	}
	s.mu.Unlock()
	select {
	case <-s.ready:
		qctx, cancel := context.WithTimeout(ctx, s.o.queryTimeout)
		defer cancel()
		s.applyForgets(qctx) // what fails, the writer does before its next write
	default:
	}
	return nil
}

// Close stops the background work and writes what is still buffered, for at most the close
// timeout (WithCloseTimeout); records it could not write are counted dropped. No goroutine of the
// store outlives Close.
func (s *Invocations) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		timer := time.AfterFunc(s.o.closeTimeout, s.hardCancel)
		s.wg.Wait()
		select {
		case <-s.ready:
			for s.hard.Err() == nil {
				if done, err := s.flush(s.hard); err != nil || done {
					break
				}
			}
		default:
		}
		timer.Stop()
		s.hardCancel()
		s.mu.Lock()
		s.dropped += uint64(len(s.pending))
		s.pending = nil
		s.mu.Unlock()
		s.pool.Close()
	})
	return nil
}

// Stats are the store's counters: every record is eventually written, dropped or discarded (by
// Forget), or still buffered.
type Stats struct {
	Recorded, Written, Dropped, Discarded uint64
	Buffered                              int
}

// Stats returns the counters now.
func (s *Invocations) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Recorded: s.recorded, Written: s.written, Dropped: s.dropped, Discarded: s.discarded, Buffered: len(s.pending)}
}

var (
	droppedDesc = prometheus.NewDesc("sless_invocations_dropped_total",
		"Invocation records not written to PostgreSQL: the buffer was full (the database away or too slow), or the process stopped before it could write them.", nil, nil)
	writtenDesc = prometheus.NewDesc("sless_invocations_written_total",
		"Invocation records written to PostgreSQL.", nil, nil)
	bufferedDesc = prometheus.NewDesc("sless_invocations_buffered",
		"Invocation records waiting to be written to PostgreSQL.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Invocations) Describe(ch chan<- *prometheus.Desc) {
	ch <- droppedDesc
	ch <- writtenDesc
	ch <- bufferedDesc
}

// Collect implements prometheus.Collector.
func (s *Invocations) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(writtenDesc, prometheus.CounterValue, float64(st.Written))
	ch <- prometheus.MustNewConstMetric(bufferedDesc, prometheus.GaugeValue, float64(st.Buffered))
}

// run connects and migrates (retrying with backoff), then writes the buffer every flush
// interval or whenever a full batch waits, and deletes expired rows in a loop of its own.
func (s *Invocations) run() {
	defer s.wg.Done()
	b := backoff{max: s.o.maxBackoff}
	for attempt := 0; ; attempt++ {
		err := s.connect(s.ctx, s.o.logger)
		if err == nil {
			break
		}
		s.setDown(err)
		level := slog.LevelWarn // once; then quieter, every few seconds while it lasts
		if attempt > 0 {
			level = slog.LevelDebug
		}
		s.o.logger.Log(s.ctx, level, "invocation history: PostgreSQL not usable yet; retrying", "error", s.redact(err.Error()))
		if !sleep(s.ctx, b.next()) {
			return
		}
	}
	s.setDown(nil)
	close(s.ready)
	s.o.logger.Info("invocation history: connected to PostgreSQL")
	if s.o.retention > 0 {
		s.wg.Add(1)
		go s.retain()
	}

	b = backoff{max: s.o.maxBackoff}
	tick := time.NewTicker(s.o.flushInterval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		}
		for {
			done, err := s.flush(s.hard)
			if err != nil {
				if !failing {
					s.o.logger.Warn("invocation history: writing to PostgreSQL failed; keeping the records and retrying", "error", s.redact(err.Error()))
				}
				failing = true
				if !sleep(s.ctx, b.next()) {
					return
				}
				continue
			}
			if failing {
				s.o.logger.Info("invocation history: writing to PostgreSQL again")
				failing = false
			}
			b = backoff{max: s.o.maxBackoff}
			if done || s.ctx.Err() != nil {
				break
			}
		}
	}
}

// flush writes up to one batch from the front of the buffer with COPY. done says the buffer held
// less than a full batch (nothing more to write now). A failed write leaves the rows buffered.
func (s *Invocations) flush(ctx context.Context) (done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if err := s.rw.Acquire(ctx, readers); err != nil {
		return false, err
	}
	defer s.rw.Release(readers)
	if err := s.applyForgets(ctx); err != nil {
		return false, err
	}
	s.mu.Lock()
	n := min(len(s.pending), s.o.batchSize)
	batch := slices.Clone(s.pending[:n])
	s.mu.Unlock()
	if n == 0 {
		return true, nil
	}
	_, err = s.pool.CopyFrom(ctx, pgx.Identifier{"invocations"},
		[]string{"namespace", "function", "time", "status", "duration_ms", "request_id", "source", "message_id"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			r := batch[i]
			return []any{r.ns, r.name, r.inv.Time, r.inv.Status, r.inv.DurationMS, r.inv.RequestID, r.inv.Source, r.inv.MessageID}, nil
		}))
	if err != nil {
		s.setDown(err)
		return false, fmt.Errorf("writing %d invocation records: %w", n, err)
	}
	s.mu.Lock()
	// Only a flush or Forget (both holding rw whole) take from the buffer, and Record only
	// appends: the first n are still the batch.
	s.pending = append(s.pending[:0], s.pending[n:]...)
	s.written += uint64(n)
	s.mu.Unlock()
	s.setDown(nil)
	return n < s.o.batchSize, nil
}

// applyForgets deletes the rows of forgotten functions, in batches. The caller holds rw whole.
func (s *Invocations) applyForgets(ctx context.Context) error {
	s.mu.Lock()
	todo := slices.Clone(s.forgets)
	s.mu.Unlock()
	for _, f := range todo {
		_, err := s.deleteBatches(ctx, flushTimeout, `DELETE FROM invocations WHERE id IN (SELECT id FROM invocations
			WHERE namespace = $1 AND function = $2 LIMIT $3)`, f.ns, f.name, deleteBatch)
		if err != nil {
			s.setDown(err)
			return fmt.Errorf("deleting the invocation records of %s/%s: %w", f.ns, f.name, err)
		}
		s.mu.Lock()
		s.forgets = slices.DeleteFunc(s.forgets, func(g forget) bool { return g == f })
		s.mu.Unlock()
	}
	return nil
}

// retain deletes rows older than the retention every retention interval.
func (s *Invocations) retain() {
	defer s.wg.Done()
	t := time.NewTicker(s.o.retentionInterval)
	defer t.Stop()
	for {
		cutoff := time.Now().Add(-s.o.retention)
		n, err := s.deleteBatches(s.ctx, flushTimeout, `DELETE FROM invocations WHERE id IN (SELECT id FROM invocations
			WHERE time < $1 LIMIT $2)`, cutoff, deleteBatch)
		if err != nil && s.ctx.Err() == nil {
			s.o.logger.Warn("invocation history: deleting expired records failed", "error", s.redact(err.Error()))
		} else if n > 0 {
			s.o.logger.Info("invocation history: deleted expired records", "rows", n)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// unavailable tells a database that is away (unreachable, shutting down, not migrated) from a
// query that is wrong.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // no answer from the server: network, timeout, closed connection
	}
	switch {
	case pe.Code == "42P01": // undefined_table: not migrated (yet)
		return true
	case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57"):
		return true // connection exception, insufficient resources, operator intervention
	}
	return false
}

// sleep waits d unless ctx ends first; it reports whether the wait ran out.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff doubles from 100 ms up to max, with ±20 % jitter.
type backoff struct {
	cur, max time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = 100 * time.Millisecond
	}
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
