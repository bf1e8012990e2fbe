package activator_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/activator"
)

// source is a backend whose instances the test sets.
type source struct {
	mu    sync.Mutex
	list  []activator.Instance
	calls atomic.Int64
}

func (s *source) set(l ...activator.Instance) { s.mu.Lock(); s.list = l; s.mu.Unlock() }

func (s *source) Instances(context.Context, string, string) ([]activator.Instance, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]activator.Instance(nil), s.list...), nil
}

// scaler records pokes.
type scaler struct{ pokes chan string }

func (s *scaler) Poke(ns, name string) {
	select {
	case s.pokes <- ns + "/" + name:
	default:
	}
}

// server is an instance: its /health answers as healthy says.
func server(t *testing.T, healthy *atomic.Bool) *url.URL {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == activator.HealthPath && (healthy == nil || healthy.Load()) {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(s.Close)
	u, _ := url.Parse(s.URL)
	return u
}

func ready(id string, u *url.URL) activator.Instance {
	return activator.Instance{ID: id, URL: u, Ready: true}
}

func TestConcurrencyIsAHardLimitAndHeldRequestsGoInOrder(t *testing.T) {
	src := &source{}
	src.set(ready("a", server(t, nil)))
	a := activator.New(src)
	ctx := context.Background()
	lim := activator.Limits{Concurrency: 2, MaxHeld: 3}
	l1, err := a.Acquire(ctx, "ns", "f", lim)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := a.Acquire(ctx, "ns", "f", lim)
	got := make(chan int, 3)
	var started sync.WaitGroup
	for i := range 3 {
		started.Add(1)
		go func() {
			started.Done()
			l, err := a.Acquire(ctx, "ns", "f", lim)
			if err != nil {
				t.Error(err)
				return
			}
			got <- i
			l.Release()
		}()
		started.Wait()
		waitHeld(t, a, i+1)
	}
	// A fourth beyond the held bound is refused at once.
	if _, err := a.Acquire(ctx, "ns", "f", lim); !errors.Is(err, activator.ErrThrottled) {
		t.Fatalf("beyond the hold queue: %v", err)
	}
	// One slot freed: the held requests get it in turn, oldest first (each releases it).
	l1.Release()
	defer l2.Release()
	for want := range 3 {
		if i := <-got; i != want {
			t.Errorf("held request %d served %dth", i, want)
		}
	}
}

func waitHeld(t *testing.T, a *activator.Activator, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range a.Loads() {
			if l.Held == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d held: %+v", n, a.Loads())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHeldRequestTimesOut(t *testing.T) {
	src := &source{}
	src.set(ready("a", server(t, nil)))
	a := activator.New(src)
	lim := activator.Limits{Concurrency: 1, MaxHeld: 10}
	l, _ := a.Acquire(context.Background(), "ns", "f", lim)
	defer l.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Acquire(ctx, "ns", "f", lim); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
	if ld := a.Loads()[0]; ld.Held != 0 || ld.InFlight != 1 {
		t.Errorf("after the timeout: %+v", ld)
	}
}

// A request with no instance waits while the scaler is poked, and goes to the new instance as
// soon as its health check answers, before the backend calls it ready.
func TestColdStartProbesTheNewInstance(t *testing.T) {
	src := &source{}
	sc := &scaler{pokes: make(chan string, 10)}
	a := activator.New(src, activator.WithScaler(sc), activator.WithProbeInterval(10*time.Millisecond))
	var healthy atomic.Bool
	u := server(t, &healthy)
	done := make(chan *activator.Lease)
	go func() {
		l, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	if p := <-sc.pokes; p != "ns/f" {
		t.Fatalf("poked %s", p)
	}
	src.set(activator.Instance{ID: "new", URL: u}) // started, not ready to the backend
	select {
	case <-done:
		t.Fatal("served before the instance was healthy")
	case <-time.After(100 * time.Millisecond):
	}
	flipped := time.Now()
	healthy.Store(true)
	l := <-done
	if l.Instance() != "new" || l.URL().Host != u.Host {
		t.Errorf("lease on %s %s", l.Instance(), l.URL())
	}
	if d := time.Since(flipped); d > 200*time.Millisecond {
		t.Errorf("served %v after the instance became healthy", d)
	}
	l.Release()
}

func TestNoInstanceWithoutAScaler(t *testing.T) {
	a := activator.New(&source{})
	if _, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10}); !errors.Is(err, activator.ErrNoInstance) {
		t.Fatalf("%v", err)
	}
	// Nor with one, when nothing can be started (no version built): the request does not wait.
	sc := &scaler{pokes: make(chan string, 1)}
	a = activator.New(&source{}, activator.WithScaler(sc))
	if _, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10, NoStart: true}); !errors.Is(err, activator.ErrNoInstance) {
		t.Fatalf("NoStart: %v", err)
	}
}

// Fewest in flight first; on a tie the instance ready longest, so load packs and others idle.
func TestLeastLoadedAndRemovedInstances(t *testing.T) {
	src := &source{}
	ua, ub := server(t, nil), server(t, nil)
	src.set(ready("a", ua), ready("b", ub))
	a := activator.New(src)
	ctx := context.Background()
	lim := activator.Limits{Concurrency: 10, MaxHeld: 10}
	var got []string
	var leases []*activator.Lease
	for range 3 {
		l, err := a.Acquire(ctx, "ns", "f", lim)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Instance())
		leases = append(leases, l)
	}
	if want := []string{"a", "b", "a"}; !equal(got, want) {
		t.Errorf("routed to %v, want %v", got, want)
	}
	for _, l := range leases {
		l.Release()
	}
	// Sequential requests stay on the first instance: the second can go idle.
	for range 5 {
		l, _ := a.Acquire(ctx, "ns", "f", lim)
		if l.Instance() != "a" {
			t.Errorf("sequential request on %s", l.Instance())
		}
		l.Release()
	}
	// An instance that cannot be reached takes no more requests.
	l, _ := a.Acquire(ctx, "ns", "f", lim)
	l.Retry()
	src.set(ready("b", ub))
	for range 3 {
		l, err := a.Acquire(ctx, "ns", "f", lim)
		if err != nil {
			t.Fatal(err)
		}
		if l.Instance() != "b" {
			t.Errorf("a removed instance got a request")
		}
		l.Release()
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Under concurrent load no instance ever has more than the concurrency in flight.
func TestConcurrencyUnderLoad(t *testing.T) {
	src := &source{}
	src.set(ready("a", server(t, nil)), ready("b", server(t, nil)))
	a := activator.New(src)
	lim := activator.Limits{Concurrency: 3, MaxHeld: 200}
	var mu sync.Mutex
	inFlight, peak := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := a.Acquire(context.Background(), "ns", "f", lim)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inFlight[l.Instance()]++
			peak[l.Instance()] = max(peak[l.Instance()], inFlight[l.Instance()])
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inFlight[l.Instance()]--
			mu.Unlock()
			l.Release()
		}()
	}
	wg.Wait()
	for id, p := range peak {
		if p > 3 {
			t.Errorf("instance %s had %d in flight, concurrency 3", id, p)
		}
	}
	if ld := a.Loads()[0]; ld.InFlight != 0 || ld.Held != 0 {
		t.Errorf("after the load: %+v", ld)
	}
}

// The source is asked on every request: a backend that switches instances without saying so is
// followed at once.
func TestRefreshOnEveryRequest(t *testing.T) {
	src := &source{}
	ua, ub := server(t, nil), server(t, nil)
	src.set(ready("a", ua))
	a := activator.New(src)
	lim := activator.Limits{Concurrency: 10, MaxHeld: 10}
	l, _ := a.Acquire(context.Background(), "ns", "f", lim)
	src.set(ready("b", ub))
	l2, err := a.Acquire(context.Background(), "ns", "f", lim)
	if err != nil || l2.Instance() != "b" {
		t.Fatalf("after the switch: %v %v", l2, err)
	}
	l.Release() // the old instance's request finishes
	l2.Release()
	if ld := a.Loads()[0]; ld.InFlight != 0 || len(ld.Instances) != 1 {
		t.Errorf("%+v", ld)
	}
}

// A cold request's timing: held, the backend's decision, first listed without and then with an
// address, healthy, granted — in that order, each when it happened; a request served at once has
// none.
func TestColdRequestTiming(t *testing.T) {
	src := &source{}
	sc := &scaler{pokes: make(chan string, 10)}
	a := activator.New(src, activator.WithScaler(sc), activator.WithProbeInterval(5*time.Millisecond))
	var healthy atomic.Bool
	u := server(t, &healthy)
	done := make(chan *activator.Lease)
	before := time.Now()
	go func() {
		l, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	<-sc.pokes
	requested := time.Now()
	src.set(activator.Instance{ID: "new", Requested: requested}) // a pod without an address yet
	time.Sleep(30 * time.Millisecond)
	listedAfter := time.Now()
	src.set(activator.Instance{ID: "new", URL: u, Requested: requested})
	time.Sleep(30 * time.Millisecond)
	listedBefore := time.Now()
	healthy.Store(true)
	l := <-done
	after := time.Now()
	tm, ok := l.Timing()
	if !ok || !l.Cold {
		t.Fatalf("a cold request reports no timing (%v, cold %v)", ok, l.Cold)
	}
	if !tm.Requested.Equal(requested) {
		t.Errorf("requested %v, want the backend's %v", tm.Requested, requested)
	}
	order := []struct {
		name string
		at   time.Time
	}{{"before", before}, {"held", tm.HeldAt}, {"requested", tm.Requested}, {"listed after", listedAfter}, {"listed", tm.Listed},
		{"listed before", listedBefore}, {"ready", tm.Ready}, {"granted", tm.Granted}, {"after", after}}
	for i := 1; i < len(order); i++ {
		if order[i].at.Before(order[i-1].at) {
			t.Errorf("%s (%v) before %s (%v)", order[i].name, order[i].at, order[i-1].name, order[i-1].at)
		}
	}
	if tm.Granted.Sub(tm.HeldAt) != l.Held {
		t.Errorf("granted − held = %v, Held %v", tm.Granted.Sub(tm.HeldAt), l.Held)
	}
	l.Release()
	// Warm: no timing.
	warm, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := warm.Timing(); ok || warm.Cold {
		t.Errorf("a request served at once reports a timing")
	}
	// Held for a busy instance (not cold): a timing whose instance was ready before the hold.
	go func() {
		time.Sleep(30 * time.Millisecond)
		warm.Release()
	}()
	l, err = a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	tm, ok = l.Timing()
	if !ok || l.Cold || !tm.Ready.Before(tm.HeldAt) || l.Held < 20*time.Millisecond {
		t.Errorf("held behind a busy instance: ok %v cold %v ready %v held at %v for %v", ok, l.Cold, tm.Ready, tm.HeldAt, l.Held)
	}
}

// A backend that lists an instance ready from the start: listed and ready are the same moment.
func TestTimingOfAnInstanceListedReady(t *testing.T) {
	src := &source{}
	sc := &scaler{pokes: make(chan string, 10)}
	a := activator.New(src, activator.WithScaler(sc), activator.WithProbeInterval(5*time.Millisecond))
	u := server(t, nil)
	done := make(chan *activator.Lease)
	go func() {
		l, _ := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
		done <- l
	}()
	<-sc.pokes
	src.set(ready("r", u))
	l := <-done
	defer l.Release()
	tm, ok := l.Timing()
	if !ok || tm.Listed.IsZero() || !tm.Listed.Equal(tm.Ready) || !tm.Requested.IsZero() {
		t.Errorf("timing %+v (ok %v): want listed = ready, requested unknown", tm, ok)
	}
}

// A function whose scale-up the tenant's quota stops: with no instance at all a request is refused
// at once (429 at /fn/) rather than held for one that will not come; with a busy instance it is
// held as usual (the instance frees up).
func TestScaleLimited(t *testing.T) {
	sc := &scaler{pokes: make(chan string, 8)}
	src := &source{}
	a := activator.New(src, activator.WithScaler(sc))
	lim := activator.Limits{Concurrency: 1, MaxHeld: 10, ScaleLimited: true}
	if _, err := a.Acquire(context.Background(), "ns", "f", lim); !errors.Is(err, activator.ErrThrottled) {
		t.Fatalf("no instance and scale-up stopped: %v, want ErrThrottled", err)
	}
	src.set(ready("a", server(t, nil)))
	first, err := a.Acquire(context.Background(), "ns", "f", lim)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := a.Acquire(context.Background(), "ns", "f", lim)
		if err == nil {
			l.Release()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the second request is held behind the first
	first.Release()
	if err := <-done; err != nil {
		t.Errorf("held behind a busy instance while scale-limited: %v", err)
	}
}

// limitedSource is a source whose backend says when the quota stops a function's scale-up.
type limitedSource struct {
	*source
	limited atomic.Bool
}

func (s *limitedSource) ScaleLimited(context.Context, string, string) bool { return s.limited.Load() }

// A request held while nothing runs is answered once the backend says the quota allows no
// instance, instead of waiting out its timeout.
func TestHeldRequestsWhenTheQuotaStopsTheStart(t *testing.T) {
	src := &limitedSource{source: &source{}}
	a := activator.New(src, activator.WithScaler(&scaler{pokes: make(chan string, 8)}), activator.WithProbeInterval(10*time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := a.Acquire(context.Background(), "ns", "f", activator.Limits{Concurrency: 1, MaxHeld: 10})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("answered before the quota said anything: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	src.limited.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, activator.ErrScaleLimited) {
			t.Fatalf("held request: %v, want ErrScaleLimited", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the held request still waits after the quota stopped the start")
	}
}
