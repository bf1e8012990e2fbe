package autoscale_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/autoscale"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func idle(id string) autoscale.Instance { return autoscale.Instance{ID: id} }

func busy(id string, n int) autoscale.Instance { return autoscale.Instance{ID: id, InFlight: n} }

func lastActive(id string, sec int) autoscale.Instance {
	return autoscale.Instance{ID: id, LastActive: at(sec)}
}

// step is a stretch of seconds during which the proxies report the same load and the backend
// asks for a decision with the same input every second, as the backends' loops do. The decision
// of its last second is checked.
type step struct {
	secs   int // at least 1
	load   autoscale.Sample
	silent bool // no Record: the proxies have not reported
	in     autoscale.Input
	want   autoscale.Decision // Reason is not compared
}

func run(t *testing.T, opts []autoscale.Option, steps []step) {
	t.Helper()
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(append([]autoscale.Option{autoscale.WithClock(clk.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	for n, s := range steps {
		var got autoscale.Decision
		start := clk.Now()
		for i := range max(s.secs, 1) {
			if i > 0 {
				clk.Advance(time.Second)
			}
			if !s.silent {
				d.Record("ns/fn", s.load)
			}
			got = d.Decide("ns/fn", s.in)
		}
		if got.Desired != s.want.Desired || !slices.Equal(got.Stop, s.want.Stop) || got.Panicking != s.want.Panicking {
			t.Errorf("step %d (%v..%v): got Desired %d, Stop %v, Panicking %v (%s); want %d, %v, %v",
				n, start.Sub(t0), clk.Now().Sub(t0), got.Desired, got.Stop, got.Panicking, got.Reason,
				s.want.Desired, s.want.Stop, s.want.Panicking)
		}
		if got.Reason == "" {
			t.Errorf("step %d: no reason", n)
		}
		clk.Advance(time.Second)
	}
}

func TestDecide(t *testing.T) {
	conc10 := autoscale.Spec{Concurrency: 10}
	idle10s := autoscale.Spec{Concurrency: 10, IdleTimeout: 10 * time.Second}
	for _, tc := range []struct {
		name  string
		opts  []autoscale.Option
		steps []step
	}{
		{"cold start: one held request starts one instance at once, panicking", nil, []step{
			{load: autoscale.Sample{Held: 1}, in: autoscale.Input{Held: 1},
				want: autoscale.Decision{Desired: 1, Panicking: true}},
		}},
		{"cold start before any sample", nil, []step{
			{silent: true, in: autoscale.Input{Held: 1}, want: autoscale.Decision{Desired: 1, Panicking: true}},
		}},
		{"cold start of a burst asks for its whole load", nil, []step{
			{load: autoscale.Sample{Held: 35}, in: autoscale.Input{Held: 35}, want: autoscale.Decision{Desired: 4, Panicking: true}},
		}},
		{"a starting instance is not asked for twice", nil, []step{
			{load: autoscale.Sample{Held: 1}, in: autoscale.Input{Held: 1, Starting: 1},
				want: autoscale.Decision{Desired: 1}},
		}},
		{"no load, no instances: stays at zero", nil, []step{
			{secs: 120, in: autoscale.Input{}, want: autoscale.Decision{}},
		}},
		{"steady 25 in flight at concurrency 10 wants 3", nil, []step{
			{secs: 60, load: autoscale.Sample{InFlight: 25},
				in:   autoscale.Input{Spec: conc10, Ready: []autoscale.Instance{busy("a", 9), busy("b", 8), busy("c", 8)}},
				want: autoscale.Decision{Desired: 3}},
		}},
		{"steady 25 on 2 instances scales to 3 without panic", nil, []step{
			{secs: 60, load: autoscale.Sample{InFlight: 20, Held: 5},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 10), busy("b", 10)}, Held: 5},
				want: autoscale.Decision{Desired: 3}},
		}},
		{"a short burst below the panic threshold does not scale up", nil, []step{
			{secs: 60, load: autoscale.Sample{InFlight: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 5)}},
				want: autoscale.Decision{Desired: 1}},
			// 5 s at 15: the panic average (5+75)/6 = 13.3 stays below 2 × 10; the stable one is 6.7.
			{secs: 5, load: autoscale.Sample{InFlight: 10, Held: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Held: 5},
				want: autoscale.Decision{Desired: 1}},
			{secs: 30, load: autoscale.Sample{InFlight: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 5)}},
				want: autoscale.Decision{Desired: 1}},
		}},
		{"a sustained rise scales up through the stable window", nil, []step{
			{secs: 60, load: autoscale.Sample{InFlight: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 5)}},
				want: autoscale.Decision{Desired: 1}},
			// 15 for 6 s: stable (54×5 + 6×15)/60 = 6 → still 1 instance.
			{secs: 6, load: autoscale.Sample{InFlight: 10, Held: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Held: 5},
				want: autoscale.Decision{Desired: 1}},
			// After 31 s of 15 the stable average passes 10: (29×5 + 31×15)/60 = 10.2.
			{secs: 25, load: autoscale.Sample{InFlight: 10, Held: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Held: 5},
				want: autoscale.Decision{Desired: 2}},
		}},
		{"panic: 2x capacity in the panic window scales up at once", nil, []step{
			{secs: 60, load: autoscale.Sample{InFlight: 10},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 5), busy("b", 5)}},
				want: autoscale.Decision{Desired: 2}},
			// 3 s at 60: panic average (3×10 + 3×60)/6 = 35 < 40.
			{secs: 3, load: autoscale.Sample{InFlight: 20, Held: 40},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 10), busy("b", 10)}, Held: 40},
				want: autoscale.Decision{Desired: 2}},
			// The 4th second: (2×10 + 4×60)/6 = 43.3 ≥ 40 → ceil(4.33) = 5, though the stable average is 13.3.
			{secs: 1, load: autoscale.Sample{InFlight: 20, Held: 40},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 10), busy("b", 10)}, Held: 40},
				want: autoscale.Decision{Desired: 5, Panicking: true}},
		}},
		{"panic: no scale-down until a stable window without the threshold", nil, []step{
			{load: autoscale.Sample{InFlight: 10, Held: 40},
				in:   autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{busy("a", 10), idle("b")}, Held: 40},
				want: autoscale.Decision{Desired: 5, Panicking: true}},
			// The surge is over and b has been idle far beyond 10 s, but the panic holds.
			{secs: 58, load: autoscale.Sample{InFlight: 1},
				in:   autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{busy("a", 1), idle("b")}},
				want: autoscale.Decision{Desired: 2, Panicking: true}},
			{secs: 1, load: autoscale.Sample{InFlight: 1},
				in:   autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{busy("a", 1), idle("b")}},
				want: autoscale.Decision{Desired: 2, Panicking: true}},
			// 60 s after the threshold was last met the panic ends and b goes.
			{secs: 1, load: autoscale.Sample{InFlight: 1},
				in:   autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{busy("a", 1), idle("b")}},
				want: autoscale.Decision{Desired: 1, Stop: []string{"b"}}},
		}},
		{"panic: never below the instances already asked for", nil, []step{
			{load: autoscale.Sample{InFlight: 10, Held: 40},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Starting: 1, Held: 40},
				want: autoscale.Decision{Desired: 5, Panicking: true}},
			// Now 6 instances are running or starting and the load has fallen: panic keeps all 6.
			{secs: 10, load: autoscale.Sample{InFlight: 2},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 1), busy("b", 1), idle("c")}, Starting: 3},
				want: autoscale.Decision{Desired: 6, Panicking: true}},
		}},
		{"shorter windows and tick as options", []autoscale.Option{
			autoscale.WithStableWindow(10 * time.Second), autoscale.WithPanicWindow(2 * time.Second), autoscale.WithPanicThreshold(3),
		}, []step{
			{load: autoscale.Sample{InFlight: 25}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Held: 15},
				want: autoscale.Decision{Desired: 3}},
			// (25+60)/2 = 42.5 over the 2 s panic window ≥ 3 × 10.
			{load: autoscale.Sample{InFlight: 10, Held: 50}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 10)}, Held: 50},
				want: autoscale.Decision{Desired: 5, Panicking: true}},
			// The threshold is met for the last time at 2 s ((60+5)/2 = 32.5), so the panic lasts to 12 s.
			{secs: 10, load: autoscale.Sample{InFlight: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 5)}},
				want: autoscale.Decision{Desired: 1, Panicking: true}},
			{load: autoscale.Sample{InFlight: 5}, in: autoscale.Input{Ready: []autoscale.Instance{busy("a", 5)}},
				want: autoscale.Decision{Desired: 1}},
		}},
		{"clamped to max_replicas", nil, []step{
			{load: autoscale.Sample{InFlight: 10, Held: 490},
				in:   autoscale.Input{Spec: autoscale.Spec{MaxReplicas: 7}, Ready: []autoscale.Instance{busy("a", 10)}, Held: 490},
				want: autoscale.Decision{Desired: 7, Panicking: true}},
		}},
		{"clamped to max_replicas by default", nil, []step{
			{load: autoscale.Sample{Held: 500}, in: autoscale.Input{Held: 500},
				want: autoscale.Decision{Desired: autoscale.DefaultMaxReplicas, Panicking: true}},
		}},
		{"clamped to min_replicas without any load", nil, []step{
			{silent: true, in: autoscale.Input{Spec: autoscale.Spec{MinReplicas: 2}}, want: autoscale.Decision{Desired: 2}},
		}},
		{"min_replicas kept when idle; idle longest first above it; busy never stopped", nil, []step{
			{secs: 400, load: autoscale.Sample{InFlight: 3},
				in: autoscale.Input{Spec: autoscale.Spec{MinReplicas: 2},
					Ready: []autoscale.Instance{lastActive("b", 90), lastActive("a", 10), busy("d", 3), lastActive("c", 50)}},
				want: autoscale.Decision{Desired: 2, Stop: []string{"a", "c"}}},
			{secs: 1000, load: autoscale.Sample{},
				in:   autoscale.Input{Spec: autoscale.Spec{MinReplicas: 2}, Ready: []autoscale.Instance{lastActive("b", 90), lastActive("d", 400)}},
				want: autoscale.Decision{Desired: 2}},
		}},
		{"idle timeout: 299 s idle stays, 300 s goes, to zero with min_replicas 0", nil, []step{
			{secs: 300, in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 0)}}, want: autoscale.Decision{Desired: 1}},
			{in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 0)}}, want: autoscale.Decision{Desired: 0, Stop: []string{"a"}}},
		}},
		{"idle timeout counts from LastActive", nil, []step{
			{secs: 400, in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 100)}}, want: autoscale.Decision{Desired: 1}},
			{in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 100)}}, want: autoscale.Decision{Desired: 0, Stop: []string{"a"}}},
		}},
		{"never to zero with a request in flight", nil, []step{
			{secs: 1000, load: autoscale.Sample{InFlight: 1},
				in: autoscale.Input{Ready: []autoscale.Instance{{ID: "a", InFlight: 1, LastActive: at(0)}}}, want: autoscale.Decision{Desired: 1}},
		}},
		{"never to zero with a request held", nil, []step{
			{secs: 300, in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 0)}}, want: autoscale.Decision{Desired: 1}, silent: true},
			{in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", 0)}, Held: 1}, want: autoscale.Decision{Desired: 1}, silent: true},
		}},
		{"an idle timeout shorter than the stable window waits for the window", nil, []step{
			{load: autoscale.Sample{InFlight: 1}, in: autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{busy("a", 1)}},
				want: autoscale.Decision{Desired: 1, Panicking: false}},
			// a has been idle 59 s, but the stable window still holds the request of second 0.
			{secs: 59, in: autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{lastActive("a", 0)}},
				want: autoscale.Decision{Desired: 1}},
			{in: autoscale.Input{Spec: idle10s, Ready: []autoscale.Instance{lastActive("a", 0)}},
				want: autoscale.Decision{Desired: 0, Stop: []string{"a"}}},
			// Gone for good: nothing asks for it again.
			{secs: 60, in: autoscale.Input{Spec: idle10s}, want: autoscale.Decision{}},
		}},
		{"starting instances are never stopped", nil, []step{
			{secs: 400, in: autoscale.Input{Ready: []autoscale.Instance{idle("a")}, Starting: 1},
				want: autoscale.Decision{Desired: 1, Stop: []string{"a"}}},
		}},
		{"max_replicas lowered: the excess goes, idle first, then the least busy, even in panic", nil, []step{
			{secs: 400, load: autoscale.Sample{InFlight: 3},
				in:   autoscale.Input{Ready: []autoscale.Instance{busy("a", 1), busy("b", 2)}},
				want: autoscale.Decision{Desired: 2}},
			// b and c are equally busy; b was first seen earlier, so it counts as idle longer and goes.
			{load: autoscale.Sample{InFlight: 5, Held: 400},
				in: autoscale.Input{Spec: autoscale.Spec{MaxReplicas: 1},
					Ready: []autoscale.Instance{busy("b", 2), busy("a", 1), busy("c", 2)}, Held: 400},
				want: autoscale.Decision{Desired: 1, Stop: []string{"a", "b"}, Panicking: true}},
		}},
		{"max_replicas lowered with instances starting: the starting ones go first", nil, []step{
			{in: autoscale.Input{Spec: autoscale.Spec{MaxReplicas: 2}, Ready: []autoscale.Instance{busy("a", 1)}, Starting: 3},
				want: autoscale.Decision{Desired: 2}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.opts, tc.steps) })
	}
}

// A restarted operator has a new decider: it has never seen the instances, has no samples, and
// the proxies may know nothing of the instances' past.
func TestDecideAfterRestart(t *testing.T) {
	three := []autoscale.Instance{idle("a"), idle("b"), idle("c")}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"idle instances stay for an IdleTimeout, then go", []step{
			{silent: true, in: autoscale.Input{Ready: three}, want: autoscale.Decision{Desired: 3}},
			{secs: 299, silent: true, in: autoscale.Input{Ready: three}, want: autoscale.Decision{Desired: 3}},
			{silent: true, in: autoscale.Input{Ready: three}, want: autoscale.Decision{Stop: []string{"a", "b", "c"}}},
		}},
		{"a LastActive older than the restart does not count", []step{
			{secs: 299, silent: true, in: autoscale.Input{Ready: []autoscale.Instance{lastActive("a", -3600)}},
				want: autoscale.Decision{Desired: 1}},
		}},
		{"instances starting are kept", []step{
			{silent: true, in: autoscale.Input{Ready: three, Starting: 2}, want: autoscale.Decision{Desired: 5}},
		}},
		{"load on the first sample does not jump to max", []step{
			{load: autoscale.Sample{InFlight: 25},
				in:   autoscale.Input{Spec: autoscale.Spec{MaxReplicas: 100}, Ready: []autoscale.Instance{busy("a", 9), busy("b", 8), busy("c", 8)}},
				want: autoscale.Decision{Desired: 3}},
		}},
		{"no sample yet, busy instances: nothing changes", []step{
			{silent: true, in: autoscale.Input{Spec: autoscale.Spec{MaxReplicas: 100}, Ready: []autoscale.Instance{busy("a", 10), busy("b", 10)}},
				want: autoscale.Decision{Desired: 2}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, nil, tc.steps) })
	}
}

// Several proxy replicas report more often than once a tick: a tick's load is the mean of its
// samples, not their sum.
func TestRecordAveragesWithinATick(t *testing.T) {
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(autoscale.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	in := autoscale.Input{Ready: []autoscale.Instance{busy("a", 5), busy("b", 5), busy("c", 5)}}
	for range 60 {
		for range 10 {
			d.Record("f", autoscale.Sample{InFlight: 15})
			clk.Advance(100 * time.Millisecond)
		}
	}
	if got := d.Decide("f", in); got.Desired != 3 || got.Panicking {
		t.Errorf("got %+v, want 3 not panicking", got)
	}
}

// Functions do not see each other's load or instances.
func TestFunctionsAreApart(t *testing.T) {
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(autoscale.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	d.Record("ns/busy", autoscale.Sample{Held: 100})
	if got := d.Decide("ns/quiet", autoscale.Input{}); got.Desired != 0 || got.Panicking {
		t.Errorf("quiet function: got %+v", got)
	}
	if got := d.Decide("ns/busy", autoscale.Input{Held: 100}); got.Desired != 10 || !got.Panicking {
		t.Errorf("busy function: got %+v", got)
	}
}

func TestForgetDropsTheFunction(t *testing.T) {
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(autoscale.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	d.Record("ns/fn", autoscale.Sample{InFlight: 30})
	d.Decide("ns/fn", autoscale.Input{Ready: []autoscale.Instance{busy("a", 10), busy("b", 10), busy("c", 10)}})
	d.Forget("ns/fn")
	// A function of the same name created again starts from nothing: no load, a new instance.
	clk.Advance(400 * time.Second)
	got := d.Decide("ns/fn", autoscale.Input{Ready: []autoscale.Instance{idle("a")}})
	if got.Desired != 1 || got.Stop != nil || got.Panicking {
		t.Errorf("got %+v, want 1 instance kept", got)
	}
}

func TestSpecDefaults(t *testing.T) {
	for _, tc := range []struct{ in, want autoscale.Spec }{
		{autoscale.Spec{}, autoscale.Spec{MinReplicas: 0, MaxReplicas: 10, Concurrency: 10, IdleTimeout: 300 * time.Second}},
		{autoscale.Spec{MinReplicas: 5}, autoscale.Spec{MinReplicas: 5, MaxReplicas: 10, Concurrency: 10, IdleTimeout: 300 * time.Second}},
		{autoscale.Spec{MinReplicas: 20}, autoscale.Spec{MinReplicas: 20, MaxReplicas: 20, Concurrency: 10, IdleTimeout: 300 * time.Second}},
		{autoscale.Spec{MinReplicas: 1, MaxReplicas: 3, Concurrency: 1, IdleTimeout: 5 * time.Second},
			autoscale.Spec{MinReplicas: 1, MaxReplicas: 3, Concurrency: 1, IdleTimeout: 5 * time.Second}},
	} {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if autoscale.DefaultMinReplicas != 0 || autoscale.DefaultMaxReplicas != 10 || autoscale.DefaultConcurrency != 10 ||
		autoscale.DefaultIdleTimeout != 300*time.Second || autoscale.DefaultStableWindow != 60*time.Second ||
		autoscale.DefaultPanicWindow != 6*time.Second || autoscale.DefaultPanicThreshold != 2.0 || autoscale.DefaultTick != time.Second {
		t.Error("a default differs from issue 16")
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec autoscale.Spec
		ok   bool
	}{
		{autoscale.Spec{}, true},
		{autoscale.Spec{MinReplicas: 100}, true},
		{autoscale.Spec{MinReplicas: 100, MaxReplicas: 100, Concurrency: 1000, IdleTimeout: 24 * time.Hour}, true},
		{autoscale.Spec{MaxReplicas: 1, Concurrency: 1, IdleTimeout: 5 * time.Second}, true},
		{autoscale.Spec{MinReplicas: -1}, false},
		{autoscale.Spec{MinReplicas: 101}, false},
		{autoscale.Spec{MaxReplicas: 101}, false},
		{autoscale.Spec{MaxReplicas: -1}, false},
		{autoscale.Spec{MinReplicas: 5, MaxReplicas: 4}, false},
		{autoscale.Spec{Concurrency: 1001}, false},
		{autoscale.Spec{Concurrency: -1}, false},
		{autoscale.Spec{IdleTimeout: 4 * time.Second}, false},
		{autoscale.Spec{IdleTimeout: 86401 * time.Second}, false},
		{autoscale.Spec{IdleTimeout: 5500 * time.Millisecond}, false},
	} {
		if err := tc.spec.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tc.spec, err, tc.ok)
		}
	}
}

// A spec that skipped Validate is forced into range rather than dividing by zero.
func TestDecideOutOfRangeSpec(t *testing.T) {
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(autoscale.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	d.Record("f", autoscale.Sample{InFlight: 3})
	spec := autoscale.Spec{MinReplicas: -3, MaxReplicas: 1000, Concurrency: -1, IdleTimeout: time.Nanosecond}
	got := d.Decide("f", autoscale.Input{Spec: spec, Ready: []autoscale.Instance{busy("a", 1), busy("b", 1), busy("c", 1)}})
	if got.Desired != 3 {
		t.Errorf("got %+v, want 3 (concurrency forced to 1)", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  autoscale.Option
	}{
		{"nil clock", autoscale.WithClock(nil)},
		{"zero tick", autoscale.WithTick(0)},
		{"panic window shorter than the tick", autoscale.WithPanicWindow(500 * time.Millisecond)},
		{"stable window shorter than the panic window", autoscale.WithStableWindow(5 * time.Second)},
		{"too many ticks in the stable window", autoscale.WithTick(time.Millisecond)},
		{"threshold below 1", autoscale.WithPanicThreshold(0.5)},
	} {
		if _, err := autoscale.New(tc.opt); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	if _, err := autoscale.New(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestConcurrentRecordAndDecide(t *testing.T) {
	clk := &fakeClock{now: t0}
	d, err := autoscale.New(autoscale.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		key := fmt.Sprintf("ns/fn%d", g%3)
		wg.Go(func() {
			for i := range 2000 {
				switch i % 4 {
				case 0:
					clk.Advance(10 * time.Millisecond)
				case 1:
					d.Decide(key, autoscale.Input{Ready: []autoscale.Instance{busy("a", i%7)}, Held: i % 3})
				case 2:
					if i%200 == 2 {
						d.Forget(key)
					}
				}
				d.Record(key, autoscale.Sample{InFlight: i % 11, Held: i % 5})
			}
		})
	}
	wg.Wait()
}
