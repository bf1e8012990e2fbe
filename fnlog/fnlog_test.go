package fnlog_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
)

// An installer's output arrives in arbitrary pieces: lines are cut at newlines, an unfinished one
// waits, a line longer than apiv1.MaxLogLine is cut, invalid UTF-8 is replaced, and only the last
// MaxLines are kept.
func TestLogLines(t *testing.T) {
	l := fnlog.NewLog("build", apiv1.StreamBuild)
	l.Printf("one\ntwo")
	l.Write([]byte("thr"))
	l.Write([]byte("ee\r\nfo"))
	l.Write([]byte("ur \xff\n" + strings.Repeat("x", apiv1.MaxLogLine+10)))
	l.Write([]byte("tail"))
	got := l.Lines()
	var texts []string
	for _, x := range got {
		texts = append(texts, x.Line[:min(len(x.Line), 8)])
		if x.Instance != "build" || x.Stream != apiv1.StreamBuild || x.Time.IsZero() {
			t.Errorf("line %+v", x)
		}
	}
	if want := "one|two|three|four \uFFFD|xxxxxxxx|tail"; strings.Join(texts, "|") != want {
		t.Errorf("lines %q, want %s", texts, want)
	}
	if n := len(got[4].Line); n > apiv1.MaxLogLine+len("…") {
		t.Errorf("a long line kept at %d bytes", n)
	}
	// A line of control bytes encodes six times its size: it must load back, as a damaged line
	// must not cost the rest.
	ctx := context.Background()
	store, _ := codestore.NewDir(t.TempDir())
	ctl := fnlog.NewLog("build", apiv1.StreamBuild)
	ctl.Printf("%s", strings.Repeat("\x01", 20000))
	ctl.Printf("after")
	fnlog.Save(ctx, store, "k/log", ctl.Lines())
	if back, err := fnlog.Load[apiv1.LogLine](ctx, store, "k/log"); err != nil || len(back) != 2 || back[1].Line != "after" {
		t.Errorf("a line of control bytes: %d lines back, %v", len(back), err)
	}
	store.Put(ctx, "k/bad", strings.NewReader("{\"line\":\"ok\"}\nnot json\n{\"line\":\"ok2\"}\n"), -1)
	if back, err := fnlog.Load[apiv1.LogLine](ctx, store, "k/bad"); err != nil || len(back) != 2 {
		t.Errorf("a damaged line: %+v %v", back, err)
	}
	big := fnlog.NewLog("build", apiv1.StreamBuild)
	for i := range fnlog.MaxLines + 10 {
		big.Printf("line %d", i)
	}
	if ls := big.Lines(); len(ls) != fnlog.MaxLines || ls[0].Line != "line 10" {
		t.Errorf("%d lines kept, first %q", len(ls), ls[0].Line)
	}
}

func TestSelect(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ls []apiv1.LogLine
	for i := range 5 {
		ls = append(ls, apiv1.LogLine{Time: base.Add(time.Duration(i) * time.Second), Line: string(rune('a' + i))})
	}
	for _, tc := range []struct {
		since time.Time
		tail  int
		want  string
	}{
		{time.Time{}, -1, "abcde"}, {time.Time{}, 2, "de"}, {time.Time{}, 0, ""}, {base.Add(3 * time.Second), -1, "de"},
		{base.Add(time.Second), 10, "bcde"}, {base.Add(time.Hour), -1, ""},
	} {
		got := ""
		for _, l := range fnlog.Select(ls, tc.since, tc.tail) {
			got += l.Line
		}
		if got != tc.want {
			t.Errorf("since %v tail %d: %q, want %q", tc.since, tc.tail, got, tc.want)
		}
	}
}

// Events: appended in order, a repeated step recorded once, the last MaxEvents kept; the stopped
// instances' logs go after KeepStopped, nothing else does.
func TestEventsAndCollect(t *testing.T) {
	ctx := context.Background()
	store, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ev := fnlog.NewEvents(store)
	ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonStored, Message: "m"})
	ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonInstallingDependencies, Message: "k"})
	ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonInstallingDependencies, Message: "k"})
	ev.Flush()
	evs, err := fnlog.LoadEvents(ctx, store, "ns", "fn")
	if err != nil || len(evs) != 2 || evs[0].Type != apiv1.EventNormal || evs[1].Reason != apiv1.ReasonInstallingDependencies {
		t.Fatalf("events %+v %v", evs, err)
	}
	for i := range fnlog.MaxEvents + 5 {
		ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonReady, Message: strings.Repeat("r", i%2+1)})
	}
	ev.Flush()
	if evs, _ := fnlog.LoadEvents(ctx, store, "ns", "fn"); len(evs) != fnlog.MaxEvents {
		t.Errorf("%d events kept", len(evs))
	}
	var nilEvents *fnlog.Events
	if err := nilEvents.Record(ctx, "ns", "fn", apiv1.Event{}); err != nil {
		t.Error(err)
	}

	fnlog.Save(ctx, store, fnlog.StoppedKey("ns", "fn", "pod-1"), []apiv1.LogLine{{Line: "x"}})
	fnlog.Save(ctx, store, fnlog.BuildKey("ns", "fn"), []apiv1.LogLine{{Line: "b"}})
	if n, err := fnlog.CollectStopped(ctx, store, time.Now()); n != 0 || err != nil {
		t.Errorf("collected %d fresh logs: %v", n, err)
	}
	if n, err := fnlog.CollectStopped(ctx, store, time.Now().Add(fnlog.KeepStopped+time.Minute)); n != 1 || err != nil {
		t.Errorf("collected %d old logs, want 1: %v", n, err)
	}
	if ok, _ := store.Exists(ctx, fnlog.BuildKey("ns", "fn")); !ok {
		t.Error("the build log was collected with the stopped instances'")
	}
	if ls, err := fnlog.Load[apiv1.LogLine](ctx, store, fnlog.StoppedKey("ns", "fn", "pod-1")); err != nil || ls != nil {
		t.Errorf("after collection: %v %v", ls, err)
	}
}

// A store that fails for a moment loses the events of that moment, not the history.
func TestEventsSurviveAStoreFailure(t *testing.T) {
	ctx := context.Background()
	dir, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	flaky := &failingGets{Store: dir}
	ev := fnlog.NewEvents(flaky)
	for _, r := range []string{apiv1.ReasonStored, apiv1.ReasonBuilding, apiv1.ReasonPushing} {
		ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: r})
		ev.Flush()
	}
	flaky.fail = true
	ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonBuilt})
	ev.Flush()
	flaky.fail = false
	ev.Record(ctx, "ns", "fn", apiv1.Event{Reason: apiv1.ReasonStarting})
	ev.Flush()
	evs, _ := fnlog.LoadEvents(ctx, dir, "ns", "fn")
	var got []string
	for _, e := range evs {
		got = append(got, e.Reason)
	}
	if strings.Join(got, ",") != "Stored,Building,Pushing,Starting" {
		t.Errorf("events after a failed read: %v", got)
	}
}

type failingGets struct {
	codestore.Store
	fail bool
}

func (f *failingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if f.fail {
		return nil, errors.New("503 Service Unavailable")
	}
	return f.Store.Get(ctx, key)
}
