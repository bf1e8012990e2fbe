package invoke

import (
	"net/http"
	"sync"
	"time"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
)

// LoadsHandler serves this replica's /fn/ load to the autoscaler: GET apiv1.LoadsPath (the
// activator's loads, read from memory: the leader asks every second) and, with pokes, GET
// apiv1.PokesPath (a long poll that answers as soon as a request is held). Serve it on an internal
// listener only, never beside the public routes: it names every tenant's functions and their
// traffic. Tenant pods cannot reach it (their NetworkPolicy lets them reach DNS only) and no public
// Service routes its port. Without pokes, PokesPath is 404.
func (p *Proxy) LoadsHandler(pokes *Pokes) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+apiv1.LoadsPath, func(w http.ResponseWriter, r *http.Request) {
		apiv1.WriteJSON(w, http.StatusOK, loadsOf(p.act.Loads()))
	})
	if pokes != nil {
		mux.Handle("GET "+apiv1.PokesPath, pokes)
	}
	return mux
}

func loadsOf(ls []activator.Load) apiv1.Loads {
	out := apiv1.Loads{Functions: make([]apiv1.FunctionLoad, 0, len(ls))}
	for _, l := range ls {
		fl := apiv1.FunctionLoad{Namespace: l.Namespace, Name: l.Name, InFlight: l.InFlight, Held: l.Held}
		for _, i := range l.Instances {
			fl.Instances = append(fl.Instances, apiv1.InstanceLoad{ID: i.ID, InFlight: i.InFlight, LastActive: i.LastActive})
		}
		out.Functions = append(out.Functions, fl)
	}
	return out
}

// MaxPokeWait bounds the wait of a poll of apiv1.PokesPath (and is its default).
const MaxPokeWait = 30 * time.Second

// maxPokedFunctions bounds what one poll collects: beyond, pokes are dropped (the autoscaler's
// next scrape sees the held requests anyway).
const maxPokedFunctions = 1024

// Pokes passes "a request is held" from /fn/ to the autoscaler of another process: give it to
// the activator as its Scaler (Backend.Scaler) and to LoadsHandler. A poke reaches every poll
// waiting at that moment; one that comes while no poll waits is dropped, which costs that cold
// request at most the autoscaler's scrape period (1 s), since the scrape sees the held request
// too. Poke never blocks.
type Pokes struct {
	mu      sync.Mutex
	waiters map[*pokeWaiter]struct{}
}

type pokeWaiter struct {
	fns  map[apiv1.FunctionRef]struct{}
	wake chan struct{} // buffered 1
}

var _ activator.Scaler = (*Pokes)(nil)

// NewPokes makes a Pokes with no poll waiting.
func NewPokes() *Pokes { return &Pokes{waiters: map[*pokeWaiter]struct{}{}} }

// Poke tells every waiting poll that ns/name has a request held.
func (p *Pokes) Poke(ns, name string) {
	ref := apiv1.FunctionRef{Namespace: ns, Name: name}
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := range p.waiters {
		if len(w.fns) < maxPokedFunctions {
			w.fns[ref] = struct{}{}
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// ServeHTTP waits for a poke, up to the "wait" query parameter (a duration, at most MaxPokeWait),
// and answers apiv1.Pokes: the functions poked meanwhile (none when the wait ended).
func (p *Pokes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wait := MaxPokeWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, apiv1.Errorf(apiv1.CodeInvalidArgument, "wait: want a duration such as 30s"))
			return
		}
		wait = min(d, MaxPokeWait)
	}
	pw := &pokeWaiter{fns: map[apiv1.FunctionRef]struct{}{}, wake: make(chan struct{}, 1)}
	p.mu.Lock()
	p.waiters[pw] = struct{}{}
	p.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-pw.wake:
	case <-t.C:
	case <-r.Context().Done():
	}
	t.Stop()
	p.mu.Lock()
	delete(p.waiters, pw)
	out := apiv1.Pokes{Functions: make([]apiv1.FunctionRef, 0, len(pw.fns))}
	for ref := range pw.fns {
		out.Functions = append(out.Functions, ref)
	}
	p.mu.Unlock()
	apiv1.WriteJSON(w, http.StatusOK, out)
}
