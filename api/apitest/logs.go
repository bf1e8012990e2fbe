package apitest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/objects"
)

// FakeLogs is an objects.Logs whose instances and lines the test makes: kept lines per instance, and
// for a running one a channel the test sends new lines on.
type FakeLogs struct {
	mu      sync.Mutex
	insts   map[string][]*fakeInstance // "ns/name" → instances
	active  int                        // ReadLog calls not returned
	ended   chan struct{}              // signalled when a ReadLog returns
	entered chan struct{}              // signalled (when there is room) when a ReadLog starts
	gates   map[string]chan struct{}   // "ns/name" → closed when its reads may go on (Gate)
}

type fakeInstance struct {
	objects.LogInstance
	lines []apiv1.LogLine
	live  chan apiv1.LogLine
}

// NewFakeLogs has no instances.
func NewFakeLogs() *FakeLogs {
	return &FakeLogs{insts: map[string][]*fakeInstance{}, ended: make(chan struct{}, 100), entered: make(chan struct{}, 100),
		gates: map[string]chan struct{}{}}
}

// Gate holds every ReadLog of ns/name's instances (counted in Active) until open is called or
// the read's context ends: reads kept in flight as long as the test wants.
func (f *FakeLogs) Gate(ns, name string) (open func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := make(chan struct{})
	f.gates[ns+"/"+name] = g
	return sync.OnceFunc(func() {
		f.mu.Lock()
		delete(f.gates, ns+"/"+name)
		f.mu.Unlock()
		close(g)
	})
}

// WaitActive waits until n ReadLog calls are in flight, or fails t after 10 s.
func (f *FakeLogs) WaitActive(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for f.Active() < n {
		select {
		case <-f.entered:
		case <-deadline:
			t.Fatalf("%d log reads in flight, want %d", f.Active(), n)
		}
	}
}

// Add makes an instance of ns/name with lines; a running one (stopped false) returns the channel
// its new lines go on.
func (f *FakeLogs) Add(ns, name, id string, stopped bool, lines ...apiv1.LogLine) chan<- apiv1.LogLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := &fakeInstance{LogInstance: objects.LogInstance{ID: id, Stopped: stopped}, lines: lines}
	if !stopped {
		in.live = make(chan apiv1.LogLine, 16)
	}
	f.insts[ns+"/"+name] = append(f.insts[ns+"/"+name], in)
	return in.live
}

// Active is how many ReadLog calls have not returned.
func (f *FakeLogs) Active() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active
}

// LogInstances implements objects.Logs.
func (f *FakeLogs) LogInstances(_ context.Context, ns, name string) ([]objects.LogInstance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []objects.LogInstance
	for _, in := range f.insts[ns+"/"+name] {
		out = append(out, in.LogInstance)
	}
	return out, nil
}

// ReadLog implements objects.Logs.
func (f *FakeLogs) ReadLog(ctx context.Context, ns, name string, inst objects.LogInstance, q objects.LogQuery, emit func(apiv1.LogLine) error) error {
	f.mu.Lock()
	var in *fakeInstance
	for _, i := range f.insts[ns+"/"+name] {
		if i.ID == inst.ID {
			in = i
		}
	}
	f.active++
	gate := f.gates[ns+"/"+name]
	f.mu.Unlock()
	select {
	case f.entered <- struct{}{}:
	default:
	}
	defer func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
		f.ended <- struct{}{}
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if in == nil {
		return nil
	}
	for _, l := range fnlog.Select(in.lines, q.Since, q.Tail) {
		if err := emit(l); err != nil {
			return err
		}
	}
	if !q.Follow || in.live == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case l, ok := <-in.live:
			if !ok {
				return nil // stopped
			}
			if err := emit(l); err != nil {
				return err
			}
		}
	}
}

// readNDJSON reads an NDJSON answer.
func readNDJSON[T any](t *testing.T, e *Env, path string) (int, []T) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	var out []T
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, v)
	}
	return resp.StatusCode, out
}

// stream opens a followed NDJSON answer; its lines arrive on the channel, closed at the end.
func stream(t *testing.T, ctx context.Context, e *Env, path string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("%s: %d", path, resp.StatusCode)
	}
	out := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out
}

func expectLine(t *testing.T, lines <-chan string, sub string) {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("the stream ended before %q", sub)
		}
		if !strings.Contains(l, sub) {
			t.Fatalf("line %s, want one with %q", l, sub)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no line %q within 10 s", sub)
	}
}

func line(at time.Time, inst, text string) apiv1.LogLine {
	return apiv1.LogLine{Time: at, Instance: inst, Stream: apiv1.StreamStdout, Line: text}
}

// GET …/logs merges the instances by time and keeps the last tail of all; since, tail, follow and
// source are checked (400 naming the parameter); an unknown function and another tenant's are 404.
func testLogs(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("talker")
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.Logs.Add(e.NS, "talker", "a", true, line(base, "a", "a0"), line(base.Add(2*time.Second), "a", "a2"), line(base.Add(4*time.Second), "a", "a4"))
	e.Logs.Add(e.NS, "talker", "b", false, line(base.Add(time.Second), "b", "b1"), line(base.Add(3*time.Second), "b", "b3"))
	p := "/v1/namespaces/" + e.NS + "/functions/talker/logs"
	texts := func(ls []apiv1.LogLine) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.Line)
		}
		return strings.Join(s, ",")
	}
	for q, want := range map[string]string{
		"":                                   "a0,b1,a2,b3,a4",
		"?tail=2":                            "b3,a4",
		"?tail=0":                            "",
		"?since=2026-12-01T10:00:02Z":        "a2,b3,a4",
		"?since=2026-12-01T10:00:02Z&tail=1": "a4",
		"?follow=false&source=instances":     "a0,b1,a2,b3,a4",
	} {
		code, ls := readNDJSON[apiv1.LogLine](t, e, p+q)
		if code != 200 || texts(ls) != want {
			t.Errorf("%s: %d %s, want %s", q, code, texts(ls), want)
		}
	}
	for q, param := range map[string]string{"?tail=10001": "tail", "?tail=-1": "tail", "?tail=x": "tail", "?since=yesterday": "since",
		"?since=-5m": "since", "?follow=maybe": "follow", "?source=disk": "source"} {
		code, ecode, body := e.Raw("GET", p+q, e.Token, "", nil)
		if code != 400 || ecode != apiv1.CodeInvalidArgument || !strings.Contains(string(body), param) {
			t.Errorf("%s: %d %s %s, want 400 invalid_argument naming %s", q, code, ecode, body, param)
		}
	}
	if code, ecode, _ := e.Raw("GET", "/v1/namespaces/"+e.NS+"/functions/nobody/logs", e.Token, "", nil); code != 404 || ecode != apiv1.CodeNotFound {
		t.Errorf("unknown function: %d %s", code, ecode)
	}
	other := e.Tenant()
	other.Ensure()
	for _, q := range []string{"", "?follow=true", "?source=build"} {
		if code, ecode, _ := other.Raw("GET", p+q, other.Token, "", nil); code != 404 || ecode != apiv1.CodeNotFound {
			t.Errorf("another tenant's logs%s: %d %s, want 404", q, code, ecode)
		}
	}
	if code, _, _ := e.Raw("GET", p, "", "", nil); code != 401 {
		t.Errorf("no token: %d", code)
	}

	// Each followed stream costs a look every second: a namespace has 16 at once on a replica.
	ctx, cancel := context.WithCancel(context.Background())
	var streams []<-chan string
	for i := range 16 {
		path := p + "?follow=true&tail=0"
		if i%2 == 1 {
			path = "/v1/namespaces/" + e.NS + "/functions/talker/events?follow=true"
		}
		streams = append(streams, stream(t, ctx, e, path))
	}
	code, ecode, _ := e.Raw("GET", p+"?follow=true", e.Token, "", nil)
	if code != http.StatusTooManyRequests || ecode != apiv1.CodeThrottled {
		t.Errorf("a 17th followed stream: %d %s, want 429 throttled", code, ecode)
	}
	if code, _, _ := other.Raw("GET", "/v1/namespaces/"+other.NS+"/functions/nobody/logs?follow=true", other.Token, "", nil); code != 404 {
		t.Errorf("another namespace is not limited by this one's streams: %d", code)
	}
	cancel()
	for _, s := range streams {
		for range s {
		}
	}
}

// GET …/logs without follow holds the lines it answers until its client has read them: a
// namespace has 4 such reads in flight on a replica; a 5th is 429 throttled with Retry-After,
// for the instances' logs and the build log alike, while another namespace reads and this one
// still follows. Once the held reads are answered, reads go through again.
func testLogReadsBounded(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("talker")
	e.Logs.Add(e.NS, "talker", "a", true, line(time.Now(), "a", "a0"))
	p := "/v1/namespaces/" + e.NS + "/functions/talker/logs"
	open := e.Logs.Gate(e.NS, "talker")
	defer open()
	held := make(chan int, 4)
	for range 4 {
		go func() {
			req, _ := http.NewRequest("GET", e.URL+p, nil)
			req.Header.Set("Authorization", "Bearer "+e.Token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				held <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			held <- resp.StatusCode
		}()
	}
	e.Logs.WaitActive(t, 4)
	for _, q := range []string{"", "?tail=10", "?source=build"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", e.URL+p+q, nil)
		req.Header.Set("Authorization", "Bearer "+e.Token)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err != nil {
			t.Errorf("a 5th read%s: %v; want 429 at once, not held like the others", q, err)
			continue
		}
		var env apiv1.ErrorBody
		json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || env.Error.Code != apiv1.CodeThrottled || resp.Header.Get("Retry-After") != "1" ||
			!strings.Contains(env.Error.Message, "at once") {
			t.Errorf("a 5th read%s: %d %s %q, Retry-After %q; want 429 throttled, Retry-After 1", q, resp.StatusCode, env.Error.Code,
				env.Error.Message, resp.Header.Get("Retry-After"))
		}
	}
	other := e.Tenant()
	other.Ensure()
	other.Function("talker")
	if code, ls := readNDJSON[apiv1.LogLine](t, other, "/v1/namespaces/"+other.NS+"/functions/talker/logs"); code != 200 || len(ls) != 0 {
		t.Errorf("another namespace's read: %d %v", code, ls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.Function("quiet")
	followed := stream(t, ctx, e, "/v1/namespaces/"+e.NS+"/functions/quiet/logs?follow=true") // bounds of its own
	cancel()
	for range followed {
	}
	open()
	for range 4 {
		if code := <-held; code != 200 {
			t.Errorf("a held read: %d, want 200 once let go", code)
		}
	}
	if code, ls := readNDJSON[apiv1.LogLine](t, e, p); code != 200 || len(ls) != 1 {
		t.Errorf("a read after the held ones: %d %v", code, ls)
	}
}

// follow=true streams the running instances' new lines and those of instances that start
// meanwhile; the client going away ends every reader (no goroutine left), and so does the
// replica draining.
func testLogsFollow(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("talker")
	base := time.Now().UTC()
	e.Logs.Add(e.NS, "talker", "gone", true, line(base, "gone", "kept"))
	liveA := e.Logs.Add(e.NS, "talker", "a", false, line(base, "a", "old"))
	p := "/v1/namespaces/" + e.NS + "/functions/talker/logs?follow=true&tail=1"
	ctx, cancel := context.WithCancel(context.Background())
	lines := stream(t, ctx, e, p)
	got := map[string]bool{}
	for range 2 { // the stopped instance's kept line and the running one's last, in either order
		select {
		case l := <-lines:
			var ll apiv1.LogLine
			json.Unmarshal([]byte(l), &ll)
			got[ll.Line] = true
		case <-time.After(10 * time.Second):
			t.Fatal("no first lines")
		}
	}
	if !got["kept"] || !got["old"] {
		t.Fatalf("first lines %v", got)
	}
	liveA <- line(time.Now(), "a", "new from a")
	expectLine(t, lines, "new from a")
	liveB := e.Logs.Add(e.NS, "talker", "b", false, line(time.Now(), "b", "b started"))
	expectLine(t, lines, "b started") // found by the next look for instances, from its first line
	liveB <- line(time.Now(), "b", "new from b")
	expectLine(t, lines, "new from b")
	cancel()
	for deadline := time.Now().Add(10 * time.Second); e.Logs.Active() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d log readers still running after the client went away", e.Logs.Active())
		}
		<-e.Logs.ended
	}

	// A draining replica ends its followed streams (they must not hold its shutdown).
	lines = stream(t, context.Background(), e, p)
	<-lines
	e.Srv.Drain()
	for deadline := time.After(10 * time.Second); ; {
		select {
		case _, ok := <-lines:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("a followed stream outlived Drain")
		}
	}
}

// source=build serves the last build's log (and, followed, what a build adds); …/events the
// lifecycle, followed too. Both come from the code store, written by the build pipeline and the
// controllers (package fnlog).
func testBuildLogAndEvents(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("builder")
	ctx := context.Background()
	p := "/v1/namespaces/" + e.NS + "/functions/builder/"
	if code, ls := readNDJSON[apiv1.LogLine](t, e, p+"logs?source=build"); code != 200 || len(ls) != 0 {
		t.Errorf("before any build: %d %v", code, ls)
	}
	blog := fnlog.NewLog("build", apiv1.StreamBuild)
	blog.Printf("stored: code 0123")
	blog.Printf("building")
	if err := fnlog.Save(ctx, e.Be.Code, fnlog.BuildKey(e.NS, "builder"), blog.Lines()); err != nil {
		t.Fatal(err)
	}
	if code, ls := readNDJSON[apiv1.LogLine](t, e, p+"logs?source=build&tail=1"); code != 200 || len(ls) != 1 || ls[0].Line != "building" {
		t.Errorf("the build log, tail 1: %d %+v", code, ls)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := stream(t, cctx, e, p+"logs?source=build&follow=true")
	expectLine(t, lines, "stored: code 0123")
	expectLine(t, lines, "building")
	blog.Printf("built img@sha256:abc")
	fnlog.Save(ctx, e.Be.Code, fnlog.BuildKey(e.NS, "builder"), blog.Lines())
	expectLine(t, lines, "built img@sha256:abc") // only the new line of the same build
	cancel()

	events := fnlog.NewEvents(e.Be.Code)
	events.Record(ctx, e.NS, "builder", apiv1.Event{Reason: apiv1.ReasonStored, Message: "code 0123 is stored"})
	events.Record(ctx, e.NS, "builder", apiv1.Event{Reason: apiv1.ReasonBuilding, Message: "building"})
	events.Flush()
	code, evs := readNDJSON[apiv1.Event](t, e, p+"events")
	if code != 200 || len(evs) != 2 || evs[0].Reason != apiv1.ReasonStored || evs[1].Type != apiv1.EventNormal || evs[1].Time.IsZero() {
		t.Errorf("events: %d %+v", code, evs)
	}
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	elines := stream(t, ectx, e, p+"events?follow=true")
	expectLine(t, elines, apiv1.ReasonStored)
	expectLine(t, elines, apiv1.ReasonBuilding)
	events.Record(ctx, e.NS, "builder", apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonFailed, Message: "build failed: boom"})
	expectLine(t, elines, "build failed: boom")
	events.Flush()
	for q, param := range map[string]string{"events?follow=sometimes": "follow", "events?since=never": "since"} {
		if code, ecode, _ := e.Raw("GET", p+q, e.Token, "", nil); code != 400 || ecode != apiv1.CodeInvalidArgument {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, ecode, param)
		}
	}
	other := e.Tenant()
	other.Ensure()
	if code, _, _ := other.Raw("GET", p+"events?follow=true", other.Token, "", nil); code != 404 {
		t.Errorf("another tenant's events: %d", code)
	}
	// Deleting the function removes its logs and events with its code.
	if err := e.C.DeleteFunction(ctx, "builder"); err != nil {
		t.Fatal(err)
	}
	if evs, _ := fnlog.LoadEvents(ctx, e.Be.Code, e.NS, "builder"); len(evs) != 0 {
		t.Errorf("events after the function's deletion: %+v", evs)
	}
	// What the deleted function's lifecycle wrote late (events go behind it) is not the history
	// of a new function of its name.
	events.Record(ctx, e.NS, "builder", apiv1.Event{Reason: apiv1.ReasonReady, Message: "the old one"})
	events.Flush()
	fnlog.Save(ctx, e.Be.Code, fnlog.StoppedKey(e.NS, "builder", "old-pod"), []apiv1.LogLine{line(time.Now(), "old-pod", "old")})
	e.Function("builder")
	if code, evs := readNDJSON[apiv1.Event](t, e, p+"events"); code != 200 || len(evs) != 0 {
		t.Errorf("a re-created function's events: %d %+v", code, evs)
	}
	if ls, _ := fnlog.Load[apiv1.LogLine](ctx, e.Be.Code, fnlog.StoppedKey(e.NS, "builder", "old-pod")); len(ls) != 0 {
		t.Errorf("a re-created function keeps its predecessor's kept logs: %+v", ls)
	}
}
