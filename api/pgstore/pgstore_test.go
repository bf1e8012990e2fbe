package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/pgstore"
	"github.com/sless-dev/sless/async/asynctest"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/objects"
)

// open opens a store on pg, waits until it has migrated, and closes it at the end of the test.
func open(t testing.TB, pg *testenv.Postgres, opts ...pgstore.Option) *pgstore.Invocations {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pg.URL, append([]pgstore.Option{pgstore.WithFlushInterval(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("%v\nPostgreSQL log:\n%s", err, pg.Log())
	}
	return s
}

// waitFor polls cond for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// rows counts a function's rows in the table, straight from PostgreSQL.
func rows(t *testing.T, pg *testenv.Postgres, ns, name string) int {
	t.Helper()
	var n int
	query(t, pg, func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), `SELECT count(*) FROM invocations WHERE namespace = $1 AND function = $2`, ns, name).Scan(&n)
	})
	return n
}

func query(t testing.TB, pg *testenv.Postgres, f func(*pgx.Conn) error) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := f(c); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func inv(i int) apiv1.Invocation {
	return apiv1.Invocation{Time: t0.Add(time.Duration(i) * time.Second), Status: 200 + i, DurationMS: float64(i) + 0.25, RequestID: fmt.Sprint("req-", i)}
}

func list(t *testing.T, s *pgstore.Invocations, ns, name string, q objects.InvocationQuery) []apiv1.Invocation {
	t.Helper()
	l, err := s.List(context.Background(), ns, name, q)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func statuses(l []apiv1.Invocation) []int {
	out := []int{}
	for _, i := range l {
		out = append(out, i.Status)
	}
	return out
}

func eq(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// Records come back newest first, paged by limit and before, each function's own.
func TestRecordAndList(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	s := open(t, pg)
	ctx := context.Background()
	// Recorded out of order (records arrive as calls end); another namespace's function of the
	// same name, and another function of the namespace.
	for _, i := range []int{3, 0, 4, 1, 2} {
		s.Record(ctx, "ns-a", "f", inv(i))
	}
	s.Record(ctx, "ns-b", "f", inv(10))
	s.Record(ctx, "ns-b", "f", inv(11))
	s.Record(ctx, "ns-a", "g", inv(20))
	waitFor(t, "8 rows written", func() bool { return s.Stats().Written == 8 })

	all := list(t, s, "ns-a", "f", objects.InvocationQuery{})
	if !eq(statuses(all), []int{204, 203, 202, 201, 200}) {
		t.Fatalf("ns-a/f: %v", statuses(all))
	}
	if all[0] != inv(4) || all[0].Time.Location() != time.UTC {
		t.Errorf("a record does not round-trip: %+v, want %+v", all[0], inv(4))
	}
	if l := list(t, s, "ns-a", "f", objects.InvocationQuery{Limit: 2}); !eq(statuses(l), []int{204, 203}) {
		t.Errorf("limit 2: %v", statuses(l))
	}
	if l := list(t, s, "ns-a", "f", objects.InvocationQuery{Limit: 2, Before: all[1].Time}); !eq(statuses(l), []int{202, 201}) {
		t.Errorf("limit 2 before the second: %v", statuses(l))
	}
	if l := list(t, s, "ns-a", "f", objects.InvocationQuery{Before: all[4].Time}); len(l) != 0 {
		t.Errorf("before the oldest: %v", statuses(l))
	}
	if l := list(t, s, "ns-b", "f", objects.InvocationQuery{}); !eq(statuses(l), []int{211, 210}) {
		t.Errorf("ns-b/f: %v", statuses(l))
	}
	if l := list(t, s, "ns-a", "g", objects.InvocationQuery{}); !eq(statuses(l), []int{220}) {
		t.Errorf("ns-a/g: %v", statuses(l))
	}
	if l := list(t, s, "ns-c", "f", objects.InvocationQuery{}); len(l) != 0 {
		t.Errorf("a namespace with no records: %v", statuses(l))
	}
}

// What is still buffered is listed with what is written, once each.
func TestListSeesTheBuffer(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	s := open(t, pg, pgstore.WithFlushInterval(time.Hour))
	ctx := context.Background()
	for i := range 3 {
		s.Record(ctx, "ns", "f", inv(i))
	}
	if l := list(t, s, "ns", "f", objects.InvocationQuery{}); !eq(statuses(l), []int{202, 201, 200}) {
		t.Errorf("buffered: %v", statuses(l))
	}
	if l := list(t, s, "ns", "f", objects.InvocationQuery{Before: inv(2).Time}); !eq(statuses(l), []int{201, 200}) {
		t.Errorf("buffered, before: %v", statuses(l))
	}
	if n := rows(t, pg, "ns", "f"); n != 0 {
		t.Fatalf("%d rows written within the hour's flush interval", n)
	}
}

// A full batch wakes the writer without waiting for the flush interval.
func TestAFullBatchIsWrittenAtOnce(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	s := open(t, pg, pgstore.WithFlushInterval(time.Hour))
	ctx := context.Background()
	for i := range 999 {
		s.Record(ctx, "ns", "f", inv(i))
	}
	time.Sleep(200 * time.Millisecond)
	if st := s.Stats(); st.Written != 0 || st.Buffered != 999 {
		t.Fatalf("less than a batch written before the flush interval: %+v", st)
	}
	for i := 999; i < 2500; i++ {
		s.Record(ctx, "ns", "f", inv(i))
	}
	waitFor(t, "the batches written", func() bool { return rows(t, pg, "ns", "f") == 2500 })
	if st := s.Stats(); st.Written != 2500 || st.Buffered != 0 {
		t.Errorf("%+v", st)
	}
	if l := list(t, s, "ns", "f", objects.InvocationQuery{Limit: 1000}); len(l) != 1000 || l[0].Status != 200+2499 {
		t.Errorf("%d listed, newest %+v", len(l), l[0])
	}
}

// Forget deletes a function's rows, written and buffered, and nothing else.
func TestForget(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	s := open(t, pg)
	ctx := context.Background()
	for i := range 5 {
		s.Record(ctx, "ns", "f", inv(i))
		s.Record(ctx, "ns", "g", inv(i))
		s.Record(ctx, "other", "f", inv(i))
	}
	waitFor(t, "15 rows written", func() bool { return s.Stats().Written == 15 })
	now := time.Now()
	s.Record(ctx, "ns", "f", apiv1.Invocation{Time: now, Status: 299}) // still buffered, most likely
	if err := s.Forget(ctx, "ns", "f"); err != nil {
		t.Fatal(err)
	}
	if l := list(t, s, "ns", "f", objects.InvocationQuery{}); len(l) != 0 {
		t.Errorf("listed after Forget: %v", statuses(l))
	}
	// A function of the same name created again keeps its own records.
	s.Record(ctx, "ns", "f", apiv1.Invocation{Time: time.Now().Add(time.Second), Status: 201})
	waitFor(t, "the new record written", func() bool { return rows(t, pg, "ns", "f") == 1 })
	if l := list(t, s, "ns", "f", objects.InvocationQuery{}); !eq(statuses(l), []int{201}) {
		t.Errorf("after Forget and a new record: %v", statuses(l))
	}
	if rows(t, pg, "ns", "g") != 5 || rows(t, pg, "other", "f") != 5 {
		t.Errorf("Forget took other functions' rows: ns/g %d, other/f %d", rows(t, pg, "ns", "g"), rows(t, pg, "other", "f"))
	}
}

// Retention deletes the rows older than its age, in batches, and only those.
func TestRetention(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	// Records first, retention later: a store that keeps everything writes them.
	writer := open(t, pg, pgstore.WithRetention(0), pgstore.WithBufferSize(30_000))
	ctx := context.Background()
	old := time.Now().Add(-2 * time.Hour)
	for i := range 25_000 { // three delete batches
		writer.Record(ctx, "ns", "f", apiv1.Invocation{Time: old.Add(time.Duration(i) * time.Millisecond), Status: 200})
	}
	for i := range 10 {
		writer.Record(ctx, "ns", "f", apiv1.Invocation{Time: time.Now().Add(-time.Duration(i) * time.Minute), Status: 201})
	}
	writer.Close()
	if st := writer.Stats(); st.Written != 25_010 || rows(t, pg, "ns", "f") != 25_010 {
		t.Fatalf("%+v, %d rows", st, rows(t, pg, "ns", "f"))
	}

	s := open(t, pg, pgstore.WithRetention(time.Hour), pgstore.WithRetentionInterval(100*time.Millisecond))
	waitFor(t, "the old rows deleted", func() bool { return rows(t, pg, "ns", "f") == 10 })
	if l := list(t, s, "ns", "f", objects.InvocationQuery{}); len(l) != 10 || l[9].Status != 201 {
		t.Errorf("kept: %v", statuses(l))
	}
	// The loop goes on: a row that has just expired goes at the next round.
	s.Record(ctx, "ns", "f", apiv1.Invocation{Time: time.Now().Add(-61 * time.Minute), Status: 500})
	waitFor(t, "the new old row written", func() bool { return s.Stats().Written == 1 })
	waitFor(t, "the new old row deleted", func() bool { return rows(t, pg, "ns", "f") == 10 })
}

// A second Open (a restart, another replica) finds the schema migrated and changes nothing; two
// opening at once migrate once.
func TestMigrationsIdempotent(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { open(t, pg) })
	}
	wg.Wait()
	s := open(t, pg)
	s.Record(context.Background(), "ns", "f", inv(1))
	waitFor(t, "a row written", func() bool { return rows(t, pg, "ns", "f") == 1 })
	// The queue's table (00003) is there and used.
	q := s.AsyncQueue()
	ev := asynctest.Event("ns", "f", time.Now())
	if err := q.Enqueue(context.Background(), ev, 1); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Get(context.Background(), "ns", "f", ev.ID); err != nil || got.State != apiv1.AsyncQueued {
		t.Fatalf("the queue after the migrations: %+v %v", got, err)
	}
	var applied int
	query(t, pg, func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied)
	})
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations: %v %v", files, err)
	}
	if applied != len(files) {
		t.Errorf("%d migrations recorded in goose_db_version, want %d (each once)", applied, len(files))
	}
}

// PostgreSQL stopped under a running store: Record does not block, List answers NotReadyError
// (without the password), what fits the buffer is written after PostgreSQL is back and the rest
// is counted dropped: written + dropped == recorded.
func TestDatabaseAway(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	const buffer = 50
	s := open(t, pg, pgstore.WithBufferSize(buffer), pgstore.WithMaxBackoff(200*time.Millisecond))
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	ctx := context.Background()
	for i := range 10 {
		s.Record(ctx, "ns", "f", inv(i))
	}
	waitFor(t, "10 rows written", func() bool { return s.Stats().Written == 10 })

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := s.List(ctx, "ns", "f", objects.InvocationQuery{})
	var nr *objects.NotReadyError
	if !errors.As(err, &nr) || !strings.HasPrefix(nr.Reason, "the invocation history is unavailable: ") || strings.Contains(nr.Reason, pg.Password) {
		t.Fatalf("List while PostgreSQL is stopped: %v", err)
	}
	t.Logf("while stopped: %v", err)
	var slowest time.Duration
	for i := range 100 {
		start := time.Now()
		s.Record(ctx, "ns", "f", inv(100+i))
		slowest = max(slowest, time.Since(start))
		if i%10 == 0 {
			time.Sleep(30 * time.Millisecond) // the writer retries meanwhile
		}
	}
	if slowest > 100*time.Millisecond {
		t.Errorf("a Record took %v while PostgreSQL was away", slowest)
	}
	if st := s.Stats(); st.Recorded != 110 || st.Written != 10 || st.Buffered != buffer || st.Dropped != 100-buffer {
		t.Errorf("while stopped: %+v", st)
	}
	if _, err := s.List(ctx, "ns", "f", objects.InvocationQuery{}); !errors.As(err, &nr) {
		t.Errorf("List while stopped, again: %v", err)
	}

	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the buffer written", func() bool { return s.Stats().Buffered == 0 })
	s.Record(ctx, "ns", "f", inv(1000)) // recorded again after the return
	waitFor(t, "the new record written", func() bool { return s.Stats().Written == 10+buffer+1 })
	st := s.Stats()
	if st.Written+st.Dropped != st.Recorded || st.Recorded != 111 {
		t.Errorf("written %d + dropped %d != recorded %d", st.Written, st.Dropped, st.Recorded)
	}
	if n := rows(t, pg, "ns", "f"); uint64(n) != st.Written {
		t.Errorf("%d rows in the table, %d counted written", n, st.Written)
	}
	l := list(t, s, "ns", "f", objects.InvocationQuery{Limit: 1000})
	if len(l) != 10+buffer+1 || l[0].Status != 1200 || l[1].Status != 200+100+buffer-1 {
		t.Errorf("after the return: %d listed, %v…", len(l), statuses(l)[:3])
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP sless_invocations_buffered Invocation records waiting to be written to PostgreSQL.
# TYPE sless_invocations_buffered gauge
sless_invocations_buffered 0
# HELP sless_invocations_dropped_total Invocation records not written to PostgreSQL: the buffer was full (the database away or too slow), or the process stopped before it could write them.
# TYPE sless_invocations_dropped_total counter
sless_invocations_dropped_total %d
# HELP sless_invocations_written_total Invocation records written to PostgreSQL.
# TYPE sless_invocations_written_total counter
sless_invocations_written_total %d
`, 100-buffer, 10+buffer+1))); err != nil {
		t.Error(err)
	}
}

// hangingProxy forwards TCP to PostgreSQL until frozen: then it holds every byte (a database
// that stops answering without closing connections, as behind a network partition).
type hangingProxy struct {
	addr string
	gate sync.RWMutex // held whole while frozen
	ln   net.Listener
}

func newHangingProxy(t *testing.T, upstream string) *hangingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangingProxy{addr: ln.Addr().String(), ln: ln}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			pipe := func(dst, src net.Conn) {
				defer conns.Done()
				defer dst.Close()
				defer src.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						p.gate.RLock()
						_, werr := dst.Write(buf[:n])
						p.gate.RUnlock()
						if werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			conns.Add(2)
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	return p
}

func (p *hangingProxy) freeze()   { p.gate.Lock() }
func (p *hangingProxy) unfreeze() { p.gate.Unlock() }

// PostgreSQL that stops answering (connections open, no bytes back): Record still returns at
// once while the writer is stuck, List gives up within its query timeout with NotReadyError, and
// everything recorded is written once it answers again.
func TestDatabaseHangs(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	proxy := newHangingProxy(t, net.JoinHostPort(pg.Host, fmt.Sprint(pg.Port)))
	u, _ := url.Parse(pg.URL)
	u.Host = proxy.addr
	s := open(t, &testenv.Postgres{URL: u.String()}, pgstore.WithQueryTimeout(500*time.Millisecond), pgstore.WithMaxBackoff(200*time.Millisecond))
	ctx := context.Background()
	for i := range 5 {
		s.Record(ctx, "ns", "f", inv(i))
	}
	waitFor(t, "5 rows written", func() bool { return s.Stats().Written == 5 })

	proxy.freeze()
	frozen := true
	defer func() {
		if frozen {
			proxy.unfreeze()
		}
	}()
	var slowest time.Duration
	for i := range 50 {
		start := time.Now()
		s.Record(ctx, "ns", "f", inv(10+i))
		slowest = max(slowest, time.Since(start))
		time.Sleep(10 * time.Millisecond) // the writer has taken a batch and waits on the database
	}
	if slowest > 100*time.Millisecond {
		t.Errorf("a Record took %v while PostgreSQL hung", slowest)
	}
	start := time.Now()
	_, err := s.List(ctx, "ns", "f", objects.InvocationQuery{})
	var nr *objects.NotReadyError
	if d := time.Since(start); !errors.As(err, &nr) || d > 2*time.Second {
		t.Errorf("List while PostgreSQL hangs: %v after %v", err, d)
	}
	t.Logf("while hung: %v", err)

	proxy.unfreeze()
	frozen = false
	waitFor(t, "the buffer written", func() bool { return s.Stats().Buffered == 0 })
	st := s.Stats()
	if st.Recorded != 55 || st.Written != 55 || st.Dropped != 0 {
		t.Errorf("after the hang: %+v", st)
	}
	if n := rows(t, pg, "ns", "f"); n != 55 {
		t.Errorf("%d rows in the table, want 55 (none lost, none twice)", n)
	}
}

// A store opened while PostgreSQL is down starts at once, records, answers NotReadyError, and
// connects, migrates and writes when PostgreSQL comes up.
func TestOpenWhileTheDatabaseIsDown(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := pgstore.Open(context.Background(), pg.URL, pgstore.WithFlushInterval(20*time.Millisecond), pgstore.WithMaxBackoff(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.Record(ctx, "ns", "f", inv(1))
	if d := time.Since(start); d > time.Second {
		t.Errorf("Open and Record took %v with PostgreSQL down", d)
	}
	_, err = s.List(ctx, "ns", "f", objects.InvocationQuery{})
	var nr *objects.NotReadyError
	if !errors.As(err, &nr) || strings.Contains(err.Error(), pg.Password) {
		t.Fatalf("List before connecting: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := s.Wait(short); err == nil || strings.Contains(err.Error(), pg.Password) {
		t.Errorf("Wait while down: %v", err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	long, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if err := s.Wait(long); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the record written", func() bool { return rows(t, pg, "ns", "f") == 1 })
}

// A wrong URL is an error of Open, its password not in it.
func TestOpenRefusesABadURL(t *testing.T) {
	_, err := pgstore.Open(context.Background(), "postgres://u:s3cr3t-pw@127.0.0.1:notaport/db")
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Errorf("%v", err)
	}
	if _, err := pgstore.Open(context.Background(), "postgres://127.0.0.1/db", pgstore.WithBufferSize(0)); err == nil {
		t.Error("a buffer of 0 accepted")
	}
}

// Close writes what is buffered and leaves no goroutine behind, whether PostgreSQL is up or was
// never reached; records after Close are counted dropped.
func TestCloseLeavesNothingBehind(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	ctx := context.Background()
	settle := func() int {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()
	for round := range 3 {
		s, err := pgstore.Open(ctx, pg.URL, pgstore.WithFlushInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			s.Record(ctx, "ns", fmt.Sprint("f", round), inv(i))
		}
		list(t, s, "ns", "f", objects.InvocationQuery{})
		s.Close()
		s.Record(ctx, "ns", "f", inv(99))
		if st := s.Stats(); st.Written != 10 || st.Dropped != 1 || rows(t, pg, "ns", fmt.Sprint("f", round)) != 10 {
			t.Errorf("Close did not write the buffer: %+v", st)
		}
	}
	// Never connected: Close ends the connection attempts; the buffer is counted dropped.
	down, err := pgstore.Open(ctx, "postgres://u:p@127.0.0.1:1/db?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	down.Record(ctx, "ns", "f", inv(1))
	time.Sleep(300 * time.Millisecond)
	closed := make(chan struct{})
	go func() { down.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs while PostgreSQL is unreachable")
	}
	if st := down.Stats(); st.Dropped != 1 || st.Recorded != 1 {
		t.Errorf("never connected: %+v", st)
	}
	var after int
	waitFor(t, "the goroutines to end", func() bool { after = settle(); return after <= before })
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// The API's conformance suite with the invocation history in PostgreSQL (the other stores in
// memory): /fn/ records, GET …/invocations lists with limit and before, deleting a function
// forgets its records.
func TestConformance(t *testing.T) {
	pg := testenv.PostgreSQL(t)
	apitest.Run(t, apitest.Backend{Name: "memstore+postgres", New: func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, apitest.Controller) {
		b, ctrl := apitest.Memstore.New(t, code, r)
		s, err := pgstore.Open(context.Background(), pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		b.Invocations, b.Async = s, s.AsyncQueue()
		return b, ctrl
	}})
}
