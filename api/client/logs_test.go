package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// fakeLogs is an API with one function "f" in namespace "ns": its build log, its instances' log
// and its events, answered as the server does (NDJSON; the error envelope otherwise).
type fakeLogs struct {
	mu        sync.Mutex
	build     []apiv1.LogLine
	instances []apiv1.LogLine
	events    []apiv1.Event
	queries   []string // each request's path and query
	hold      bool     // followed streams stay open after the lines, until the client leaves
}

func (f *fakeLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.Path+"?"+r.URL.RawQuery)
	build, inst, evs, hold := f.build, f.instances, f.events, f.hold
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" {
		writeErr(w, apiv1.Errorf(apiv1.CodeUnauthenticated, "no token"))
		return
	}
	var items []any
	switch r.URL.Path {
	case "/v1/namespaces/ns/functions/f/logs":
		tail, err := apiv1.ParseTail(r.URL.Query().Get("tail"))
		if err != nil {
			writeErr(w, apiv1.Errorf(apiv1.CodeInvalidArgument, "%v", err))
			return
		}
		lines := inst
		if r.URL.Query().Get("source") == apiv1.LogSourceBuild {
			lines = build
		} else if lines == nil {
			writeErr(w, apiv1.Errorf(apiv1.CodeNotReady, "this platform keeps no instance logs"))
			return
		}
		lines = lines[max(0, len(lines)-tail):]
		for _, l := range lines {
			items = append(items, l)
		}
	case "/v1/namespaces/ns/functions/f/events":
		for _, e := range evs {
			items = append(items, e)
		}
	default:
		writeErr(w, apiv1.Errorf(apiv1.CodeNotFound, "function not found"))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, it := range items {
		enc.Encode(it)
	}
	w.(http.Flusher).Flush()
	if hold && r.URL.Query().Get("follow") == "true" {
		<-r.Context().Done()
	}
}

func writeErr(w http.ResponseWriter, e *apiv1.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(apiv1.StatusOf(e.Code))
	json.NewEncoder(w).Encode(apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: e.Code, Message: e.Message}})
}

func newFake(t *testing.T, f *fakeLogs) *Client {
	t.Helper()
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	c, err := New(hs.URL, "tok", WithNamespace("ns"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var t0 = time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)

func line(sec int, inst, text string) apiv1.LogLine {
	return apiv1.LogLine{Time: t0.Add(time.Duration(sec) * time.Second), Instance: inst, Stream: apiv1.StreamStdout, Line: text}
}

func collect(c *Client, ctx context.Context, o LogsOptions) ([]apiv1.LogLine, error) {
	var got []apiv1.LogLine
	err := c.Logs(ctx, "f", o, func(l apiv1.LogLine) error {
		got = append(got, l)
		return nil
	})
	return got, err
}

func TestLogsQueryAndLines(t *testing.T) {
	f := &fakeLogs{instances: []apiv1.LogLine{line(1, "a", "one"), line(2, "b", `two "quoted" <tag> & é`), line(3, "a", "three")}}
	c := newFake(t, f)
	ctx := context.Background()
	got, err := collect(c, ctx, LogsOptions{})
	if err != nil || len(got) != 3 || got[1] != f.instances[1] {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err = collect(c, ctx, LogsOptions{Tail: new(0)}); err != nil || len(got) != 0 {
		t.Errorf("tail 0: %+v, %v", got, err)
	}
	if got, err = collect(c, ctx, LogsOptions{Tail: new(1), Since: "5m", Source: apiv1.LogSourceInstances}); err != nil || len(got) != 1 || got[0].Line != "three" {
		t.Errorf("tail 1: %+v, %v", got, err)
	}
	want := []string{
		"/v1/namespaces/ns/functions/f/logs?",
		"/v1/namespaces/ns/functions/f/logs?tail=0",
		"/v1/namespaces/ns/functions/f/logs?since=5m&source=instances&tail=1",
	}
	if strings.Join(f.queries, "\n") != strings.Join(want, "\n") {
		t.Errorf("queries:\n%s\nwant:\n%s", strings.Join(f.queries, "\n"), strings.Join(want, "\n"))
	}
}

func TestLogsErrors(t *testing.T) {
	f := &fakeLogs{}
	c := newFake(t, f)
	ctx := context.Background()
	_, err := collect(c, ctx, LogsOptions{})
	var ae *apiv1.Error
	if !errors.As(err, &ae) || ae.Code != apiv1.CodeNotReady || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("no instance logs: %v", err)
	}
	if _, err = collect(c, ctx, LogsOptions{Tail: new(apiv1.MaxLogTail + 1)}); !errors.As(err, &ae) || ae.Code != apiv1.CodeInvalidArgument {
		t.Errorf("tail too big: %v", err)
	}
	if err := c.Logs(ctx, "nope", LogsOptions{}, func(apiv1.LogLine) error { return nil }); !IsNotFound(err) {
		t.Errorf("unknown function: %v", err)
	}
	// emit's error ends the stream with it.
	f.instances = []apiv1.LogLine{line(1, "a", "x"), line(2, "a", "y")}
	stop := errors.New("stop")
	n := 0
	if err := c.Logs(ctx, "f", LogsOptions{}, func(apiv1.LogLine) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("emit error: %v after %d", err, n)
	}
}

// A line as long as the server can send (the longest text, all of it \u-escaped) is read; a
// longer one is an error, not an unbounded buffer.
func TestLogsLineBound(t *testing.T) {
	long := strings.Repeat("\x01", apiv1.MaxLogLine)
	f := &fakeLogs{build: []apiv1.LogLine{line(1, "build", long)}}
	c := newFake(t, f)
	got, err := collect(c, context.Background(), LogsOptions{Source: apiv1.LogSourceBuild})
	if err != nil || len(got) != 1 || got[0].Line != long {
		t.Fatalf("longest line: %d lines, %v", len(got), err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Write([]byte(`{"line":"` + strings.Repeat("x", maxStreamLine) + `"}` + "\n"))
	}))
	defer hs.Close()
	c2, _ := New(hs.URL, "tok", WithNamespace("ns"))
	if err := c2.Logs(context.Background(), "f", LogsOptions{}, func(apiv1.LogLine) error { return nil }); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("too long: %v", err)
	}
}

// A followed stream delivers lines as they come and ends without an error when ctx does, even
// past the client's overall timeout.
func TestLogsFollow(t *testing.T) {
	f := &fakeLogs{instances: []apiv1.LogLine{line(1, "a", "first")}, hold: true}
	hs := httptest.NewServer(f)
	defer hs.Close()
	c, _ := New(hs.URL, "tok", WithNamespace("ns"), WithHTTPClient(&http.Client{Timeout: 200 * time.Millisecond}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	got := make(chan apiv1.LogLine, 1)
	go func() {
		done <- c.Logs(ctx, "f", LogsOptions{Follow: true}, func(l apiv1.LogLine) error { got <- l; return nil })
	}()
	select {
	case l := <-got:
		if l.Line != "first" {
			t.Errorf("line %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no line while the stream stays open")
	}
	time.Sleep(400 * time.Millisecond) // past the client's timeout
	select {
	case err := <-done:
		t.Fatalf("the stream ended before ctx: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after cancel: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if q := f.queries[0]; !strings.HasSuffix(q, "?follow=true") {
		t.Errorf("query %s", q)
	}
}

func TestEventsAndWatch(t *testing.T) {
	ev := func(sec int, reason, msg string) apiv1.Event {
		return apiv1.Event{Time: t0.Add(time.Duration(sec) * time.Second), Type: apiv1.EventNormal, Reason: reason, Message: msg}
	}
	f := &fakeLogs{events: []apiv1.Event{ev(1, apiv1.ReasonStored, "old"), ev(2, apiv1.ReasonReady, "old")}}
	c := newFake(t, f)
	ctx := context.Background()
	var got []apiv1.Event
	if err := c.Events(ctx, "f", false, "1h", func(e apiv1.Event) error { got = append(got, e); return nil }); err != nil || len(got) != 2 {
		t.Fatalf("events %+v %v", got, err)
	}
	if q := f.queries[0]; !strings.HasSuffix(q, "/events?since=1h") {
		t.Errorf("query %s", q)
	}
	w, err := c.WatchEvents(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := w.Next(ctx); len(n) != 0 {
		t.Errorf("old events reported: %+v", n)
	}
	f.mu.Lock()
	f.events = append(f.events, ev(2, apiv1.ReasonStored, "same time, new"), ev(3, apiv1.ReasonBuilding, "b"))
	f.mu.Unlock()
	n, err := w.Next(ctx)
	if err != nil || len(n) != 2 || n[0].Message != "same time, new" || n[1].Reason != apiv1.ReasonBuilding {
		t.Errorf("new events %+v %v", n, err)
	}
	if n, _ := w.Next(ctx); len(n) != 0 {
		t.Errorf("reported twice: %+v", n)
	}
	// A function not created yet: its events are all new.
	w, err = c.WatchEvents(ctx, "nope")
	if err != nil {
		t.Fatalf("unknown function: %v", err)
	}
	if _, err := w.Next(ctx); !IsNotFound(err) {
		t.Errorf("unknown function: %v", err)
	}
}

func TestExplainFailure(t *testing.T) {
	ev := func(sec int, reason, msg string) apiv1.Event {
		return apiv1.Event{Time: t0.Add(time.Duration(sec) * time.Second), Reason: reason, Message: msg}
	}
	var build []apiv1.LogLine
	for i := range 30 {
		build = append(build, line(i, "build", "pip line "+string(rune('a'+i%26))))
	}
	build = append(build, line(40, "build", "ERROR: No matching distribution found for nosuchpkg"))
	f := &fakeLogs{build: build, instances: []apiv1.LogLine{line(50, "f-1", "Traceback: handler.nope not found")},
		events: []apiv1.Event{ev(1, apiv1.ReasonStored, "code stored"), ev(2, apiv1.ReasonInstallingDependencies, "pip"),
			ev(3, apiv1.ReasonFailed, "dependencies failed: pip exited 1")}}
	c := newFake(t, f)
	ctx := context.Background()
	fn := &apiv1.Function{Name: "f", Status: apiv1.FunctionStatus{Phase: apiv1.PhaseFailed, Message: "status message"}}

	fl := c.ExplainFailure(ctx, fn)
	if fl.Stage != apiv1.ReasonInstallingDependencies || fl.Message != "dependencies failed: pip exited 1" || fl.Source != apiv1.LogSourceBuild ||
		len(fl.Lines) != FailureLogLines || fl.LogErr != nil {
		t.Fatalf("build failure %+v", fl)
	}
	s := fl.String()
	for _, w := range []string{"failed at stage InstallingDependencies: dependencies failed: pip exited 1", "last 20 lines of the build log",
		"  ERROR: No matching distribution found for nosuchpkg"} {
		if !strings.Contains(s, w) {
			t.Errorf("%q lacks %q", s, w)
		}
	}

	// A start failure: the instances' log.
	f.events = append(f.events, ev(4, apiv1.ReasonStored, ""), ev(5, apiv1.ReasonBuilt, ""), ev(6, apiv1.ReasonStarting, "starting"),
		ev(7, apiv1.ReasonFailed, "the function exited"))
	fl = c.ExplainFailure(ctx, fn)
	if fl.Stage != apiv1.ReasonStarting || fl.Source != apiv1.LogSourceInstances || len(fl.Lines) != 1 {
		t.Fatalf("start failure %+v", fl)
	}
	if s := fl.String(); !strings.Contains(s, "instance log:\n  f-1 Traceback: handler.nope not found") {
		t.Errorf("start failure text %q", s)
	}

	// A failure after a stage that finished: said so; after Built, the start failed.
	f.events = append(f.events, ev(8, apiv1.ReasonStored, ""), ev(9, apiv1.ReasonFailed, "build failed: requirements.txt line 1"))
	if fl = c.ExplainFailure(ctx, fn); fl.Stage != apiv1.ReasonStored || fl.Source != apiv1.LogSourceBuild ||
		fl.Summary() != "failed after stage Stored: build failed: requirements.txt line 1" {
		t.Errorf("after Stored: %+v %s", fl, fl.Summary())
	}
	f.events = append(f.events, ev(10, apiv1.ReasonBuilt, ""), ev(11, apiv1.ReasonFailed, "no instance started"))
	if fl = c.ExplainFailure(ctx, fn); fl.Stage != apiv1.ReasonBuilt || fl.Source != apiv1.LogSourceInstances {
		t.Errorf("after Built: %+v", fl)
	}

	// No events: the status message and the build log.
	f.events = nil
	fl = c.ExplainFailure(ctx, fn)
	if fl.Stage != "" || fl.Message != "status message" || fl.Source != apiv1.LogSourceBuild || len(fl.Lines) != FailureLogLines {
		t.Errorf("no events %+v", fl)
	}
	if s := fl.String(); !strings.HasPrefix(s, "failed: status message\n") {
		t.Errorf("no events text %q", s)
	}
	// No events and no build log: the instances'; none either: said so.
	f.build, f.instances = nil, nil
	fl = c.ExplainFailure(ctx, fn)
	if fl.Source != apiv1.LogSourceInstances || fl.LogErr == nil || !strings.Contains(fl.String(), "the instance log could not be read") {
		t.Errorf("nothing to read %+v: %s", fl, fl.String())
	}
}

func TestSettled(t *testing.T) {
	ready := func(conds ...apiv1.Condition) *apiv1.Function {
		return &apiv1.Function{Status: apiv1.FunctionStatus{Phase: apiv1.PhaseReady, CodeSHA256: "a", Conditions: conds}}
	}
	for _, tc := range []struct {
		f    *apiv1.Function
		want bool
	}{
		{ready(), true},
		{ready(apiv1.Condition{Type: apiv1.ConditionReady, Status: "True"}), true},
		{ready(apiv1.Condition{Type: apiv1.ConditionBuilt, Status: "True"}, apiv1.Condition{Type: apiv1.ConditionReady, Status: "False"}), false},
		{&apiv1.Function{Status: apiv1.FunctionStatus{Phase: apiv1.PhaseFailed, CodeSHA256: "a"}}, true},
		{&apiv1.Function{Status: apiv1.FunctionStatus{Phase: apiv1.PhaseBuilding, CodeSHA256: "a"}}, false},
		{&apiv1.Function{Status: apiv1.FunctionStatus{Phase: apiv1.PhaseReady, CodeSHA256: "b"}}, false},
	} {
		if got := Settled(tc.f, "a"); got != tc.want {
			t.Errorf("%+v: %v", tc.f.Status, got)
		}
	}
}
