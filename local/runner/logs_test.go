package runner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

func writeLog(t *testing.T, path string, recs ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range recs {
		fmt.Fprintln(f, r)
	}
}

func readAll(t *testing.T, r *Runner, inst objects.LogInstance, q objects.LogQuery) []apiv1.LogLine {
	t.Helper()
	var out []apiv1.LogLine
	if err := r.ReadLog(context.Background(), "ns", "fn", inst, q, func(l apiv1.LogLine) error { out = append(out, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// podman's k8s-file records become lines: parts joined, streams kept apart, a function's
// oversized or broken output bounded, since and tail applied.
func TestReadLogParsesK8sFile(t *testing.T) {
	r := &Runner{dataDir: t.TempDir(), pools: map[string]*pool{}}
	flags, err := r.logFlags("ns", "fn", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(flags[3], "path=")
	huge := strings.Repeat("x", apiv1.MaxLogLine+100)
	writeLog(t, path,
		"2026-12-01T10:00:00.000000001+00:00 stdout F hello",
		"2026-12-01T10:00:01.000000000+00:00 stdout P part one, ",
		"2026-12-01T10:00:01.500000000+00:00 stderr F oops",
		"2026-12-01T10:00:02.000000000+00:00 stdout F part two",
		"not a record at all",
		"2026-12-01T10:00:03.000000000+00:00 stdout F ",
		"2026-12-01T10:00:04.000000000+00:00 stdout F "+huge,
		"2026-12-01T10:00:05.000000000+00:00 stdout F bad \xff utf8",
	)
	insts, err := r.LogInstances(context.Background(), "ns", "fn")
	if err != nil || len(insts) != 1 || !insts[0].Stopped {
		t.Fatalf("instances %+v %v (not running: stopped)", insts, err)
	}
	all := readAll(t, r, insts[0], objects.LogQuery{Tail: -1})
	var got []string
	for _, l := range all {
		if l.Instance != "c-1" {
			t.Errorf("instance %q", l.Instance)
		}
		got = append(got, l.Stream+":"+l.Line[:min(20, len(l.Line))])
	}
	want := []string{"stdout:hello", "stderr:oops", "stdout:part one, part two", "stdout:", "stdout:" + strings.Repeat("x", 20), "stdout:bad \uFFFD utf8"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines\n%q\nwant\n%q", got, want)
	}
	if l := all[4].Line; len(l) > apiv1.MaxLogLine+len("…") || !strings.HasSuffix(l, "…") {
		t.Errorf("a huge line is kept at %d bytes", len(l))
	}
	if tail := readAll(t, r, insts[0], objects.LogQuery{Tail: 2}); len(tail) != 2 || tail[1].Line != "bad \uFFFD utf8" {
		t.Errorf("tail 2: %+v", tail)
	}
	since := readAll(t, r, insts[0], objects.LogQuery{Tail: -1, Since: time.Date(2026, 12, 1, 10, 0, 2, 0, time.UTC)})
	if len(since) != 3 || since[0].Line != "" {
		t.Errorf("since 10:00:02: %d lines, first %+v", len(since), since[0])
	}
	if err := r.ReadLog(context.Background(), "ns", "fn", objects.LogInstance{ID: "../../etc/passwd"}, objects.LogQuery{}, nil); err == nil {
		t.Error("a path in an instance ID was read")
	}
}

// Following a running container's log: lines as they come, from a file conmon started over, and
// the end when the container stops; the caller going away ends it too.
func TestReadLogFollows(t *testing.T) {
	r := &Runner{dataDir: t.TempDir(), pools: map[string]*pool{}}
	flags, _ := r.logFlags("ns", "fn", "c-1")
	path := strings.TrimPrefix(flags[3], "path=")
	writeLog(t, path, "2026-12-01T10:00:00Z stdout F before")
	r.pools["ns/fn"] = &pool{ready: []*Instance{{Name: "c-1"}}}
	insts, _ := r.LogInstances(context.Background(), "ns", "fn")
	if len(insts) != 1 || insts[0].Stopped {
		t.Fatalf("instances %+v: want the running one", insts)
	}
	lines := make(chan apiv1.LogLine, 10)
	done := make(chan error, 1)
	go func() {
		done <- r.ReadLog(context.Background(), "ns", "fn", insts[0], objects.LogQuery{Tail: 10, Follow: true},
			func(l apiv1.LogLine) error { lines <- l; return nil })
	}()
	next := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l.Line != want {
				t.Errorf("line %q, want %q", l.Line, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no line %q", want)
		}
	}
	next("before")
	writeLog(t, path, "2026-12-01T10:00:01Z stdout F after")
	next("after")
	// conmon's rotation: a new file in the old one's place.
	os.Rename(path, path+".old")
	writeLog(t, path, "2026-12-01T10:00:02Z stdout F rotated")
	next("rotated")
	writeLog(t, path, "2026-12-01T10:00:03Z stdout P unfinished")
	r.mu.Lock()
	delete(r.pools, "ns/fn") // stopped
	r.mu.Unlock()
	next("unfinished")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("following a stopped container's log did not end")
	}

	// The caller leaving ends a follow of a running one.
	r.pools["ns/fn"] = &pool{ready: []*Instance{{Name: "c-1"}}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- r.ReadLog(ctx, "ns", "fn", insts[0], objects.LogQuery{Tail: 0, Follow: true}, func(apiv1.LogLine) error { return nil })
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a follow outlived its caller")
	}
	os.Remove(path + ".old")
	// Kept an hour after it stopped, then collected.
	delete(r.pools, "ns/fn")
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(path, old, old)
	if insts, _ := r.LogInstances(context.Background(), "ns", "fn"); len(insts) != 0 {
		t.Errorf("a log stopped two hours ago is listed: %+v", insts)
	}
	r.CollectLogs()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a log stopped two hours ago is still there: %v", err)
	}
}

// A stopped container's log: its unfinished last line is read too, its hour counts from its
// removal, and a spare's file (never started, empty) is no instance.
func TestStoppedLog(t *testing.T) {
	r := &Runner{dataDir: t.TempDir(), pools: map[string]*pool{}}
	flags, _ := r.logFlags("ns", "fn", "c-1")
	path := strings.TrimPrefix(flags[3], "path=")
	writeLog(t, path, "2026-12-01T10:00:00Z stdout F first", "2026-12-01T10:00:01Z stderr P fatal: no newline")
	spare, _ := r.logFlags("ns", "fn", "c-2")
	os.WriteFile(strings.TrimPrefix(spare[3], "path="), nil, 0o600)
	old := time.Now().Add(-3 * time.Hour)
	os.Chtimes(path, old, old) // quiet for hours before it was stopped
	r.stoppedLog("c-1")
	insts, _ := r.LogInstances(context.Background(), "ns", "fn")
	if len(insts) != 1 || !insts[0].Stopped {
		t.Fatalf("instances %+v: want the stopped c-1 only (its hour counts from its stop; the spare is none)", insts)
	}
	lines := readAll(t, r, insts[0], objects.LogQuery{Tail: -1})
	if len(lines) != 2 || lines[1].Line != "fatal: no newline" || lines[1].Stream != "stderr" {
		t.Errorf("lines %+v", lines)
	}
}

// Followers of a function's instances share one read of its log directory per logPoll: 8
// instances followed for 3 polls list it once while the clock stands still, and once more when it
// moves on, not once per follower and poll (24 reads before).
func TestFollowersShareDirectoryReads(t *testing.T) {
	const n = 8
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	reads := 0
	r := &Runner{dataDir: t.TempDir(), pools: map[string]*pool{},
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		readDir: func(dir string) ([]os.DirEntry, error) {
			mu.Lock()
			reads++
			mu.Unlock()
			return os.ReadDir(dir)
		}}
	p := &pool{}
	var paths []string
	for i := range n {
		flags, err := r.logFlags("ns", "fn", fmt.Sprintf("c-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, strings.TrimPrefix(flags[3], "path="))
		writeLog(t, paths[i], "2026-12-01T10:00:00Z stdout F start")
		p.ready = append(p.ready, &Instance{Name: fmt.Sprintf("c-%d", i)})
	}
	r.pools["ns/fn"] = p
	insts, err := r.LogInstances(context.Background(), "ns", "fn")
	if err != nil || len(insts) != n {
		t.Fatalf("instances %+v %v", insts, err)
	}
	reads = 0 // LogInstances' own read; no follower runs yet
	ctx, cancel := context.WithCancel(context.Background())
	lines := make(chan apiv1.LogLine, 4*n)
	var wg sync.WaitGroup
	for _, in := range insts {
		wg.Go(func() {
			r.ReadLog(ctx, "ns", "fn", in, objects.LogQuery{Tail: -1, Follow: true}, func(l apiv1.LogLine) error { lines <- l; return nil })
		})
	}
	defer func() { cancel(); wg.Wait() }()
	for range n { // sent once each has read its file: what comes next, its follow loop sends
		if l := <-lines; l.Line != "start" {
			t.Fatalf("line %q, want start", l.Line)
		}
	}
	// round appends a line to every file and waits until every follower has sent it: each has
	// looked at its container (stillRunning) once more in between.
	round := func(k int) {
		t.Helper()
		for _, p := range paths {
			writeLog(t, p, fmt.Sprintf("2026-12-01T10:00:0%dZ stdout F round %d", k, k))
		}
		for range n {
			select {
			case l := <-lines:
				if l.Line != fmt.Sprintf("round %d", k) {
					t.Fatalf("line %q in round %d", l.Line, k)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: not every follower sent its line", k)
			}
		}
	}
	for k := 1; k <= 3; k++ {
		round(k)
	}
	mu.Lock()
	got := reads
	clock = clock.Add(logPoll)
	mu.Unlock()
	if got != 1 {
		t.Errorf("%d followers for 3 polls read the log directory %d times, want 1", n, got)
	}
	round(4)
	mu.Lock()
	got = reads
	mu.Unlock()
	if got != 2 {
		t.Errorf("after one logPoll more, %d directory reads, want 2", got)
	}
}
