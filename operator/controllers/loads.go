package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
)

// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// LoadsPortName is the name of the port, in the EndpointSlices of LoadScraper.Service, that
// /fn/ replicas serve their loads on.
const LoadsPortName = "loads"

// Defaults of LoadScraper.
const (
	// DefaultScrapeTimeout bounds one replica's answer.
	DefaultScrapeTimeout = 500 * time.Millisecond
	// DefaultKeepAnswer is how long a replica's last answer stands in for answers it does not give.
	DefaultKeepAnswer = 3 * time.Second
)

// maxLoadsBytes bounds one replica's answer.
const maxLoadsBytes = 16 << 20

// LoadScraper reads the load of every /fn/ replica (apiv1.LoadsPath on each ready or serving
// endpoint of Service's EndpointSlices, port LoadsPortName), all at once, and sums it per function:
// in flight and held are added, and so is each instance's in flight; an instance's LastActive is
// the latest any replica reports.
//
// A replica that does not answer (it is slow, dead, or gone from the slices) counts with its last
// answer for KeepAnswer, then not at all. "No answer" never reads as "idle": while a replica still
// listed has no answer standing, Loads is Partial and the Scaler scales nothing down; once the
// replica has left the slices its requests went with it, and an instance it kept busy still looks
// busy until the idle timeout from when the Scaler last saw it so (Scaler.scale remembers). With no
// answer at all, Loads fails and the Scaler decides nothing.
type LoadScraper struct {
	// Reader lists EndpointSlices (the manager's cache: the Service must carry the label the cache
	// selects on).
	Reader client.Reader
	// Namespace and Service name the Service in front of the replicas' loads port.
	Namespace, Service string
	// HTTP asks the replicas (default: DefaultScrapeTimeout, no proxy). Its Timeout also bounds a
	// poll of apiv1.PokesPath unless 0: WatchPokes polls with a client of its own made from its
	// Transport.
	HTTP *http.Client
	// KeepAnswer: the default is DefaultKeepAnswer.
	KeepAnswer time.Duration
	// Now replaces time.Now (tests).
	Now func() time.Time

	mu   sync.Mutex
	last map[string]answer // by replica
}

type answer struct {
	at    time.Time
	loads []apiv1.FunctionLoad
}

// replica is one /fn/ replica's address.
type replica struct {
	id   string // its pod's name, or its address
	base string // http://ip:port
}

func (s *LoadScraper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *LoadScraper) client() *http.Client {
	if s.HTTP != nil {
		return s.HTTP
	}
	return defaultScrapeClient
}

var defaultScrapeClient = &http.Client{Timeout: DefaultScrapeTimeout, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}

// replicas lists the endpoints of the Service that may hold requests: ready ones, and terminating
// ones still serving (they drain what they have).
func (s *LoadScraper) replicas(ctx context.Context) ([]replica, error) {
	var l discoveryv1.EndpointSliceList
	if err := s.Reader.List(ctx, &l, client.InNamespace(s.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: s.Service}); err != nil {
		return nil, fmt.Errorf("listing the endpoints of %s/%s: %w", s.Namespace, s.Service, err)
	}
	var out []replica
	for _, sl := range l.Items {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var port int32
		for _, p := range sl.Ports {
			if p.Port != nil && p.Name != nil && *p.Name == LoadsPortName {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			// A replica that is draining (terminating, its readiness failed on purpose) still
			// holds requests and takes pokes until it is gone: keep asking it.
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			serving := ep.Conditions.Serving != nil && *ep.Conditions.Serving
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if !ready && !serving && !terminating {
				continue
			}
			for _, a := range ep.Addresses {
				id := a
				if ep.TargetRef != nil && ep.TargetRef.Name != "" {
					id = ep.TargetRef.Name
				}
				out = append(out, replica{id: id, base: "http://" + net.JoinHostPort(a, strconv.Itoa(int(port)))})
			}
		}
	}
	// A pod in two slices (during an update) is asked once.
	slices.SortFunc(out, func(a, b replica) int { return cmp.Compare(a.id, b.id) })
	return slices.CompactFunc(out, func(a, b replica) bool { return a.id == b.id }), nil
}

// Loads is every function's load summed over the /fn/ replicas.
type Loads struct {
	Functions []activator.Load
	// Partial: a replica listed as ready has given no answer within KeepAnswer (or none yet). What
	// it serves and holds is unknown, so the Scaler scales nothing down meanwhile; a dead replica
	// leaves the slices once its readiness fails.
	Partial bool
}

// Loads asks every replica at once and returns the sum per function (see LoadScraper).
func (s *LoadScraper) Loads(ctx context.Context) (Loads, error) {
	reps, err := s.replicas(ctx)
	if err != nil {
		return Loads{}, err
	}
	fresh := make([]*answer, len(reps))
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			var l apiv1.Loads
			if errs[i] = s.get(ctx, r.base+apiv1.LoadsPath, &l); errs[i] == nil {
				fresh[i] = &answer{at: s.now(), loads: l.Functions}
			}
		})
	}
	wg.Wait()

	now, keep := s.now(), cmp.Or(s.KeepAnswer, DefaultKeepAnswer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]answer{}
	}
	for i, r := range reps {
		if fresh[i] != nil {
			s.last[r.id] = *fresh[i]
			continue
		}
		log.FromContext(ctx).V(1).Info("a /fn/ replica did not answer", "replica", r.id, "error", errs[i])
	}
	// An answer stands for KeepAnswer, then goes, whether its replica failed or left the slices.
	for id, a := range s.last {
		if now.Sub(a.at) >= keep {
			log.FromContext(ctx).Info("dropping the load of a /fn/ replica that stopped answering", "replica", id, "answered", a.at)
			delete(s.last, id)
		}
	}
	var out Loads
	for _, r := range reps {
		if _, ok := s.last[r.id]; !ok {
			out.Partial = true
		}
	}
	if len(s.last) == 0 {
		if len(reps) == 0 {
			return Loads{}, fmt.Errorf("no ready endpoint of %s/%s: no /fn/ replica to ask", s.Namespace, s.Service)
		}
		return Loads{}, fmt.Errorf("no /fn/ replica of %s/%s answered: %w", s.Namespace, s.Service, errors.Join(errs...))
	}
	answers := make([]answer, 0, len(s.last))
	for _, a := range s.last {
		answers = append(answers, a)
	}
	out.Functions = sumLoads(answers)
	return out, nil
}

// sumLoads adds the replicas' answers up per function.
func sumLoads(answers []answer) []activator.Load {
	byFn := map[types.NamespacedName]*activator.Load{}
	var order []types.NamespacedName
	for _, a := range answers {
		for _, fl := range a.loads {
			k := types.NamespacedName{Namespace: fl.Namespace, Name: fl.Name}
			l := byFn[k]
			if l == nil {
				l = &activator.Load{Namespace: fl.Namespace, Name: fl.Name}
				byFn[k] = l
				order = append(order, k)
			}
			l.InFlight += max(fl.InFlight, 0)
			l.Held += max(fl.Held, 0)
			for _, il := range fl.Instances {
				j := slices.IndexFunc(l.Instances, func(x activator.InstanceLoad) bool { return x.ID == il.ID })
				if j < 0 {
					l.Instances = append(l.Instances, activator.InstanceLoad{ID: il.ID})
					j = len(l.Instances) - 1
				}
				l.Instances[j].InFlight += max(il.InFlight, 0)
				if il.LastActive.After(l.Instances[j].LastActive) {
					l.Instances[j].LastActive = il.LastActive
				}
			}
		}
	}
	out := make([]activator.Load, 0, len(order))
	for _, k := range order {
		out = append(out, *byFn[k])
	}
	return out
}

func (s *LoadScraper) get(ctx context.Context, url string, v any) error {
	return getJSON(ctx, s.client(), url, v)
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("GET %s: %s: %w", url, resp.Status, errNotServed)
		}
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLoadsBytes)).Decode(v); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return nil
}

// pokePoll is how long one poll of apiv1.PokesPath waits for a poke.
const pokePoll = 25 * time.Second

// WatchPokes polls apiv1.PokesPath of every replica (one long poll each, the replicas listed again
// every second) and calls poke for each function a replica holds a request of, until ctx ends. A
// replica that does not serve PokesPath is asked again a minute later; one that fails, a second
// later. A poke lost in between costs at most a scrape period: the held request is in the loads.
func (s *LoadScraper) WatchPokes(ctx context.Context, poke func(ns, name string)) {
	c := &http.Client{Transport: s.client().Transport} // no Timeout: the poll waits
	polling := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range polling {
			cancel()
		}
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		reps, err := s.replicas(ctx)
		if err == nil {
			listed := map[string]bool{}
			for _, r := range reps {
				listed[r.base] = true
				if polling[r.base] == nil {
					pctx, cancel := context.WithCancel(ctx)
					polling[r.base] = cancel
					go pollPokes(pctx, c, r.base, poke)
				}
			}
			for base, cancel := range polling {
				if !listed[base] {
					cancel()
					delete(polling, base)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func pollPokes(ctx context.Context, c *http.Client, base string, poke func(ns, name string)) {
	url := base + apiv1.PokesPath + "?wait=" + pokePoll.String()
	for ctx.Err() == nil {
		var p apiv1.Pokes
		rctx, cancel := context.WithTimeout(ctx, pokePoll+5*time.Second)
		err := getJSON(rctx, c, url, &p)
		cancel()
		if err != nil {
			pause := time.Second
			if errors.Is(err, errNotServed) {
				pause = time.Minute
			}
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			continue
		}
		for _, f := range p.Functions {
			poke(f.Namespace, f.Name)
		}
	}
}

// errNotServed: the replica does not serve the path (404).
var errNotServed = errors.New("not served")
