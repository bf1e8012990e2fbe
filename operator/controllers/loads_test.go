package controllers_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/invoke"
	"github.com/sless-dev/sless/operator/controllers"
)

// fakeReplica stands in for one /fn/ replica's internal listener.
type fakeReplica struct {
	srv   *httptest.Server
	loads atomic.Pointer[apiv1.Loads]
	slow  atomic.Bool // answer only when the request gives up
}

func newFakeReplica(t *testing.T, l apiv1.Loads) *fakeReplica {
	r := &fakeReplica{}
	r.loads.Store(&l)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != apiv1.LoadsPath {
			http.NotFound(w, req)
			return
		}
		if r.slow.Load() {
			<-req.Context().Done()
			return
		}
		json.NewEncoder(w).Encode(r.loads.Load())
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// dialer sends connections to fake pod IPs (on the loads port) to the fake replicas.
type dialer struct {
	mu    sync.Mutex
	hosts map[string]string // "10.0.0.1:9090" → "127.0.0.1:NNNN"
}

func (d *dialer) route(podAddr string, r *fakeReplica) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts[podAddr] = r.srv.Listener.Addr().String()
}

func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	to, ok := d.hosts[addr]
	d.mu.Unlock()
	if !ok {
		to = "127.0.0.1:1" // nothing listens: refused
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

type endpoint struct {
	pod, ip            string
	ready, terminating bool
}

// loadsSlice is the EndpointSlice of the loads Service with these endpoints, on port 9090.
func loadsSlice(ns string, eps ...endpoint) *discoveryv1.EndpointSlice {
	name, port := controllers.LoadsPortName, int32(9090)
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "sless-api-loads-abcde", Namespace: ns,
		Labels: map[string]string{discoveryv1.LabelServiceName: "sless-api-loads"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}}}
	for _, e := range eps {
		ready, serving, terminating := e.ready && !e.terminating, e.ready, e.terminating
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}})
	}
	return sl
}

// The scraper asks every replica listed in the loads Service's EndpointSlices at once and sums
// their loads; a slow replica costs the scrape its timeout, not more; a slow or dead replica's last
// answer stands for KeepAnswer, then goes, and while such a replica is still listed the loads are
// Partial.
func TestLoadScraperSumsTheReplicas(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	const ns = "sless-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var clockMu sync.Mutex
	now := t0.Add(time.Minute)
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	hot := func(inFlight, held int, insts ...apiv1.InstanceLoad) apiv1.FunctionLoad {
		return apiv1.FunctionLoad{Namespace: "sless-0000000000000001", Name: "hot", InFlight: inFlight, Held: held, Instances: insts}
	}
	a := newFakeReplica(t, apiv1.Loads{Functions: []apiv1.FunctionLoad{
		hot(2, 1, apiv1.InstanceLoad{ID: "hot-1", InFlight: 2, LastActive: t0})}})
	b := newFakeReplica(t, apiv1.Loads{Functions: []apiv1.FunctionLoad{
		hot(1, 0, apiv1.InstanceLoad{ID: "hot-1", InFlight: 1, LastActive: t0.Add(time.Second)}, apiv1.InstanceLoad{ID: "hot-2", LastActive: t0}),
		{Namespace: "sless-0000000000000002", Name: "cold", Held: 3}}})
	c := newFakeReplica(t, apiv1.Loads{Functions: []apiv1.FunctionLoad{hot(0, 2)}})
	d := &dialer{hosts: map[string]string{}}
	d.route("10.0.0.1:9090", a)
	d.route("10.0.0.2:9090", b)
	d.route("10.0.0.3:9090", c)
	d.route("10.0.0.4:9090", c) // a pod not ready: never asked
	// A replica draining (terminating, its readiness failed on purpose) still holds requests: asked.
	e := newFakeReplica(t, apiv1.Loads{Functions: []apiv1.FunctionLoad{{Namespace: "sless-0000000000000003", Name: "draining", Held: 1}}})
	d.route("10.0.0.5:9090", e)

	sl := loadsSlice(ns, endpoint{"api-a", "10.0.0.1", true, false}, endpoint{"api-b", "10.0.0.2", true, false},
		endpoint{"api-c", "10.0.0.3", true, true}, endpoint{"api-d", "10.0.0.4", false, false}, endpoint{"api-e", "10.0.0.5", false, true})
	if err := env.Client.Create(ctx, sl); err != nil {
		t.Fatal(err)
	}
	s := &controllers.LoadScraper{Reader: env.Client, Namespace: ns, Service: "sless-api-loads", Now: clock,
		HTTP: &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DialContext: d.DialContext}}}

	all := []activator.Load{
		{Namespace: "sless-0000000000000001", Name: "hot", InFlight: 3, Held: 3, Instances: []activator.InstanceLoad{
			{ID: "hot-1", InFlight: 3, LastActive: t0.Add(time.Second)}, {ID: "hot-2", LastActive: t0}}},
		{Namespace: "sless-0000000000000002", Name: "cold", Held: 3},
		{Namespace: "sless-0000000000000003", Name: "draining", Held: 1},
	}
	check := func(what string, want []activator.Load, partial bool) {
		t.Helper()
		start := time.Now()
		got, err := s.Loads(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: the scrape took %v (the replicas are asked at once, 300 ms each at most)", what, took)
		}
		sortLoads(got.Functions)
		sortLoads(want)
		if !loadsEqual(got.Functions, want) || got.Partial != partial {
			t.Errorf("%s:\n got %+v partial %v\nwant %+v partial %v", what, got.Functions, got.Partial, want, partial)
		}
	}
	check("every replica answers (terminating ones, serving or draining, included)", all, false)

	// b hangs, c and e are dead: their last answers stand for KeepAnswer.
	b.slow.Store(true)
	c.srv.Close()
	e.srv.Close()
	advance(2 * time.Second)
	check("b slow and c dead, within KeepAnswer", all, false)

	// Then they go, and the loads are partial while b and c are still listed.
	advance(2 * time.Second)
	onlyA := []activator.Load{{Namespace: "sless-0000000000000001", Name: "hot", InFlight: 2, Held: 1,
		Instances: []activator.InstanceLoad{{ID: "hot-1", InFlight: 2, LastActive: t0}}}}
	check("b and c silent beyond KeepAnswer", onlyA, true)

	// Once they leave the slices, the view is whole again.
	sl.Endpoints = sl.Endpoints[:1]
	if err := env.Client.Update(ctx, sl); err != nil {
		t.Fatal(err)
	}
	check("b and c gone from the slices", onlyA, false)

	// With no replica answering, the loads are unknown (an error, never "idle").
	a.srv.Close()
	advance(5 * time.Second)
	if got, err := s.Loads(ctx); err == nil {
		t.Errorf("no replica answered, and Loads said %+v", got)
	}
	if err := env.Client.Delete(ctx, sl); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Loads(ctx); err == nil {
		t.Errorf("no replica listed, and Loads said %+v", got)
	}
}

// A request held in another process reaches the Scaler's poke at once: the scraper long-polls
// every replica's apiv1.PokesPath (invoke.Pokes).
func TestLoadScraperWatchesPokes(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "sless-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pokes := invoke.NewPokes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == apiv1.PokesPath {
			pokes.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	defer cancel() // first: the poll ends, then the server closes
	d := &dialer{hosts: map[string]string{"10.0.0.1:9090": srv.Listener.Addr().String()}}
	if err := env.Client.Create(ctx, loadsSlice(ns, endpoint{"api-a", "10.0.0.1", true, false})); err != nil {
		t.Fatal(err)
	}
	s := &controllers.LoadScraper{Reader: env.Client, Namespace: ns, Service: "sless-api-loads",
		HTTP: &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DialContext: d.DialContext}}}
	got := make(chan apiv1.FunctionRef, 16)
	go s.WatchPokes(ctx, func(ns, name string) { got <- apiv1.FunctionRef{Namespace: ns, Name: name} })

	// Poke until the poll is in place (a poke with no poll waiting is dropped by design).
	deadline := time.Now().Add(10 * time.Second)
	for {
		pokes.Poke("sless-0000000000000001", "hot")
		select {
		case ref := <-got:
			if ref != (apiv1.FunctionRef{Namespace: "sless-0000000000000001", Name: "hot"}) {
				t.Fatalf("poked %+v", ref)
			}
			// The next poke comes through within the poll, well under the 300 ms timeout of a
			// scrape (the poll is not bound by it).
			time.Sleep(400 * time.Millisecond)
			start := time.Now()
			pokes.Poke("sless-0000000000000001", "hot")
			select {
			case <-got:
				t.Logf("a poke reached the scraper %v after it was made", time.Since(start))
			case <-time.After(5 * time.Second):
				t.Fatal("a second poke did not come through")
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no poke came through")
		}
	}
}

func sortLoads(ls []activator.Load) {
	slices.SortFunc(ls, func(a, b activator.Load) int {
		if a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name {
			return -1
		}
		return 1
	})
	for _, l := range ls {
		slices.SortFunc(l.Instances, func(a, b activator.InstanceLoad) int {
			if a.ID < b.ID {
				return -1
			}
			return 1
		})
	}
}

func loadsEqual(a, b []activator.Load) bool {
	return slices.EqualFunc(a, b, func(x, y activator.Load) bool {
		return x.Namespace == y.Namespace && x.Name == y.Name && x.InFlight == y.InFlight && x.Held == y.Held &&
			slices.EqualFunc(x.Instances, y.Instances, func(p, q activator.InstanceLoad) bool {
				return p.ID == q.ID && p.InFlight == q.InFlight && p.LastActive.Equal(q.LastActive)
			})
	})
}
