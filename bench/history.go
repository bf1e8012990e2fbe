package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/pgstore"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/objects"
)

// Issue 17's benchmark of the invocation history in PostgreSQL: what recording every /fn/ call
// costs /fn/ (the same function, API and load generator as the proxy section, with the backend's
// Invocations a no-op or api/pgstore), and how many rows per second one store's writer sustains.
const (
	historyPairs    = 5                // off/on pairs per layout
	historyRun      = 5 * time.Second  // one run
	historySustain  = 10 * time.Second // one sustained-write measurement
	historyWriters  = 4                // goroutines calling Record in the sustained measurement
	historyMinRatio = 0.95             // the target: throughput with recording / without
)

// noopInvocations is recording off: Record keeps nothing, List finds nothing.
type noopInvocations struct{}

func (noopInvocations) Record(context.Context, string, string, apiv1.Invocation) {}
func (noopInvocations) List(context.Context, string, string, objects.InvocationQuery) ([]apiv1.Invocation, error) {
	return nil, nil
}
func (noopInvocations) Forget(context.Context, string, string) error { return nil }

func benchHistory(ctx context.Context, c config, work string) error {
	fn, direct, err := startHelloPython(ctx)
	if err != nil {
		return err
	}
	defer func() { fn.Process.Kill(); fn.Wait() }()

	// Under os.TempDir(): run as root, the server runs as the postgres user, which must be able to
	// reach its directory (the bench's work directory is root's alone).
	pgDir, err := os.MkdirTemp("", "sless-bench-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgDir)
	logf("history: starting PostgreSQL on 127.0.0.1 in %s", pgDir)
	pg, err := testenv.StartPostgres("127.0.0.1", pgDir)
	if err != nil {
		return err
	}
	defer pg.Close()
	store, err := openHistory(ctx, pg.URL)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			store.Close()
		}
	}()

	offURL, stopOff, err := startAPI(ctx, filepath.Join(work, "history-off"), direct, noopInvocations{})
	if err != nil {
		return err
	}
	defer stopOff()
	onURL, stopOn, err := startAPI(ctx, filepath.Join(work, "history-on"), direct, store)
	if err != nil {
		return err
	}
	defer stopOn()

	conc := c.proxyConc
	var sent int64 // requests the "on" API was sent: each is one record
	type cpuUse struct{ self, pg float64 }
	var lastCPU cpuUse // of the last run
	run := func(u string, d time.Duration) (loadResult, error) {
		self0, pg0 := selfCPU(), postgresCPU(pg)
		r, err := load(ctx, u+"/", conc, d)
		lastCPU = cpuUse{selfCPU() - self0, postgresCPU(pg) - pg0}
		if u == onURL {
			sent += int64(len(r.lat)) + r.errors
		}
		return r, err
	}
	// Warm both paths (the function, the API's connections to it) before measuring.
	for _, u := range []string{offURL, onURL} {
		if _, err := run(u, time.Second); err != nil {
			return err
		}
	}

	fmt.Printf("\n### /fn/ with invocation recording into PostgreSQL vs recording off (python3.11 runtime serving examples/hello-python, %d concurrent keep-alive clients, %d off/on pairs × %v per row; load average before: %s)\n\n",
		conc, historyPairs, historyRun, loadavg())
	fmt.Println("| setup | recording | requests/s | p50 | p99 | errors | per run (requests/s) | CPU per request: bench process (API + load generator) | CPU per request: PostgreSQL |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	type outcome struct {
		ratio, minRatio, maxRatio float64
		addedP99, addedP50        float64
	}
	measure := func(setup string) (outcome, error) {
		logf("history (%s): %d clients, %d pairs of %v runs, recording off and on alternately", setup, conc, historyPairs, historyRun)
		var off, on loadResult
		var offRuns, onRuns []string
		var offCPU, onCPU cpuUse
		o := outcome{minRatio: 1e9}
		for i := 0; i < historyPairs; i++ {
			order := []string{offURL, onURL}
			if i%2 == 1 { // off, on | on, off | off, on: a drift of the machine weighs on both
				order = []string{onURL, offURL}
			}
			var pair [2]loadResult
			for _, u := range order {
				r, err := run(u, historyRun)
				if err != nil {
					return o, err
				}
				if u == onURL {
					pair[1] = r
					onCPU = cpuUse{onCPU.self + lastCPU.self, onCPU.pg + lastCPU.pg}
				} else {
					pair[0] = r
					offCPU = cpuUse{offCPU.self + lastCPU.self, offCPU.pg + lastCPU.pg}
				}
			}
			off, on = off.merge(pair[0]), on.merge(pair[1])
			offRuns = append(offRuns, fmt.Sprintf("%.0f", pair[0].rps()))
			onRuns = append(onRuns, fmt.Sprintf("%.0f", pair[1].rps()))
			r := pair[1].rps() / pair[0].rps()
			o.minRatio, o.maxRatio = min(o.minRatio, r), max(o.maxRatio, r)
		}
		for _, row := range []struct {
			name string
			r    loadResult
			runs []string
			cpu  cpuUse
		}{{"off (no-op recorder)", off, offRuns, offCPU}, {"on (api/pgstore → PostgreSQL)", on, onRuns, onCPU}} {
			n := float64(max(len(row.r.lat), 1))
			fmt.Printf("| %s | %s | %.0f | %d µs | %d µs | %d | %s | %.1f µs | %.1f µs |\n", setup, row.name, row.r.rps(),
				row.r.pct(50).Microseconds(), row.r.pct(99).Microseconds(), row.r.errors, strings.Join(row.runs, ", "),
				row.cpu.self/n*1e6, row.cpu.pg/n*1e6)
		}
		o.ratio = on.rps() / off.rps()
		o.addedP99 = (on.pct(99) - off.pct(99)).Seconds() * 1000
		o.addedP50 = (on.pct(50) - off.pct(50)).Seconds() * 1000
		return o, nil
	}
	shared, err := measure("all on both cores")
	if err != nil {
		return err
	}
	// As in the proxy section: the function on core 1, the API and the load generator on core 0;
	// PostgreSQL (elsewhere when deployed) joins the API on core 0, so what it costs is charged.
	if err := pin(fn.Process.Pid, "1"); err != nil {
		return err
	}
	if err := pin(os.Getpid(), "0"); err != nil {
		return err
	}
	pgPids, err := postgresPids(pg)
	if err != nil {
		return err
	}
	for _, p := range pgPids {
		pin(p, "0") // a backend may have exited meanwhile
	}
	pinned, err := measure("function on its own core (PostgreSQL with the API)")
	pin(os.Getpid(), "0,1")
	if pids, perr := postgresPids(pg); perr == nil {
		for _, p := range pids {
			pin(p, "0,1")
		}
	}
	if err != nil {
		return err
	}
	fmt.Printf("\nLoad average after: %s\n\n", loadavg())
	fmt.Println("| target | function on its own core | verdict | all on both cores | verdict |")
	fmt.Println("|---|---|---|---|---|")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	fmt.Printf("| /fn/ throughput, recording on / off ≥ %.2f× | %.3f× (pairs %.2f–%.2f) | %s | %.3f× (pairs %.2f–%.2f) | %s |\n", historyMinRatio,
		pinned.ratio, pinned.minRatio, pinned.maxRatio, verdict(pinned.ratio >= historyMinRatio),
		shared.ratio, shared.minRatio, shared.maxRatio, verdict(shared.ratio >= historyMinRatio))
	fmt.Printf("| p99 added by recording (no target) | %+.2f ms (p50 %+.2f ms) | | %+.2f ms (p50 %+.2f ms) | |\n",
		pinned.addedP99, pinned.addedP50, shared.addedP99, shared.addedP50)

	// Every request the "on" API answered is a row, unless the store counted it dropped.
	st, rows, err := settle(ctx, store, pg.URL, sent)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Println("| requests sent to /fn/ with recording on (warm-up included) | recorded | dropped | written | rows in PostgreSQL | rows = sent − dropped |")
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| %d | %d | %d | %d | %d | %s |\n", sent, st.Recorded, st.Dropped, st.Written, rows,
		map[bool]string{true: "yes", false: "**no**"}[rows == sent-int64(st.Dropped)])
	closed = true
	store.Close()

	return benchHistoryWriter(ctx, pg)
}

// benchHistoryWriter measures the rows per second one store's writer (one COPY at a time, batches
// of 1,000, the default 10,000-record buffer) puts into PostgreSQL, with Record called from several
// goroutines: once as fast as they can (the buffer full, the excess dropped and counted; the
// callers compete with the writer and PostgreSQL for the two cores), and once held back by the
// buffer's fill (the writer never idle, nothing dropped).
func benchHistoryWriter(ctx context.Context, pg *testenv.Postgres) error {
	fmt.Printf("\n### Invocation rows written per second by one api/pgstore (default buffer 10,000, batches of 1,000, %d goroutines calling Record, %v per row; load average before: %s)\n\n",
		historyWriters, historySustain, loadavg())
	fmt.Println("| Record called | records offered/s | rows written/s | dropped | dropped % | rows in PostgreSQL (count(*) after Close) | written + dropped = recorded | PostgreSQL CPU per row (cores busy) |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, mode := range []struct {
		name  string
		flood bool
	}{{"as fast as possible (buffer full)", true}, {"held back while the buffer is > 80 % full", false}} {
		if err := truncateInvocations(ctx, pg.URL); err != nil {
			return err
		}
		logf("history: sustained writes, Record %s, %v", mode.name, historySustain)
		store, err := openHistory(ctx, pg.URL)
		if err != nil {
			return err
		}
		ns := apiv1.NamespaceFor("bench")
		ids := make([]string, 1024)
		for i := range ids {
			ids[i] = fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		}
		st0, pg0 := store.Stats(), postgresCPU(pg)
		start := time.Now()
		deadline := start.Add(historySustain)
		var wg sync.WaitGroup
		for g := 0; g < historyWriters; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; {
					if !mode.flood && store.Stats().Buffered > 8_000 {
						time.Sleep(time.Millisecond)
						continue
					}
					for j := 0; j < 100; j++ {
						store.Record(ctx, ns, "hello", apiv1.Invocation{Status: 200, DurationMS: 1.25, RequestID: ids[i%len(ids)]})
						i++
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		st1, pgUsed := store.Stats(), postgresCPU(pg)-pg0
		store.Close()
		fin := store.Stats()
		rows, err := countInvocations(ctx, pg.URL)
		if err != nil {
			return err
		}
		offered := st1.Recorded - st0.Recorded
		dropped := st1.Dropped - st0.Dropped
		written := st1.Written - st0.Written
		fmt.Printf("| %s | %.0f | %.0f | %d | %.1f %% | %d | %s | %.1f µs (%.2f) |\n", mode.name,
			float64(offered)/elapsed.Seconds(), float64(written)/elapsed.Seconds(),
			dropped, 100*float64(dropped)/float64(max(offered, 1)), rows,
			map[bool]string{true: "yes", false: "**no**"}[fin.Written+fin.Dropped == fin.Recorded && uint64(rows) == fin.Written],
			pgUsed/float64(max(written, 1))*1e6, pgUsed/elapsed.Seconds())
	}
	fmt.Printf("\nLoad average after: %s\n", loadavg())
	return ctx.Err()
}

func openHistory(ctx context.Context, url string) (*pgstore.Invocations, error) {
	store, err := pgstore.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := store.Wait(wctx); err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}

// settle waits until the store has recorded every request sent (the API records after the
// response) and written its buffer, then counts the table.
func settle(ctx context.Context, store *pgstore.Invocations, url string, sent int64) (pgstore.Stats, int64, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := store.Stats()
		if (int64(st.Recorded) >= sent && st.Buffered == 0) || time.Now().After(deadline) {
			rows, err := countInvocations(ctx, url)
			return store.Stats(), rows, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countInvocations(ctx context.Context, url string) (int64, error) {
	var n int64
	err := withConn(ctx, url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT count(*) FROM invocations").Scan(&n)
	})
	return n, err
}

func truncateInvocations(ctx context.Context, url string) error {
	return withConn(ctx, url, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "TRUNCATE invocations")
		return err
	})
}

func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// postgresPids are the postmaster (from its postmaster.pid) and its children: backends forked
// later inherit the postmaster's CPU affinity.
func postgresPids(pg *testenv.Postgres) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil, fmt.Errorf("postmaster.pid: %q", first)
	}
	pids := []int{pm}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); len(f) > 1 && f[1] == strconv.Itoa(pm) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 1 {
		return nil, errors.New("no PostgreSQL backends found")
	}
	return pids, nil
}

// selfCPU is the CPU time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// postgresCPU is the CPU time PostgreSQL has used, in seconds: the postmaster's own and that of
// the children it has reaped, and that of its live children (the backends).
func postgresCPU(pg *testenv.Postgres) float64 {
	pids, err := postgresPids(pg)
	if err != nil {
		return 0
	}
	var ticks int
	for i, pid := range pids {
		f := procStat(pid)
		if len(f) < 15 {
			continue
		}
		fields := f[11:13] // utime, stime
		if i == 0 {
			fields = f[11:15] // and cutime, cstime: the backends and workers that have exited
		}
		for _, v := range fields {
			n, _ := strconv.Atoi(v)
			ticks += n
		}
	}
	return float64(ticks) / 100 // USER_HZ
}

// procStat is /proc/pid/stat's fields after "pid (comm)": state, ppid, …
func procStat(pid int) []string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(stat), ')') // comm may hold spaces and parentheses
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// loadavg is the machine's 1-, 5- and 15-minute load average (the machine is shared).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
