package controllers

import (
	"cmp"
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/autoscale"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// The operator's leader election (its Lease, in its own namespace):
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=sless-system

// podDeletionCost is the annotation the ReplicaSet controller reads to choose which pods go
// first when a Deployment scales down (the lowest cost goes first).
const podDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// AnnotationScaledAt is the annotation the Scaler stamps on a Deployment, in the same patch as
// its replicas, when it scales it up: the decision's time (RFC 3339, nanoseconds). It is not in
// the pod template, so it starts no rollout; it splits a cold start into decision and pod start.
const AnnotationScaledAt = "sless.dev/scaled-at"

// Scaler sets each running Function's Deployment replicas from its load, with the decider both
// backends share (autoscale): every Tick, and at once when /fn/ holds a request (Poke). It is the
// only writer of the replicas of a running function (FunctionReconciler.Autoscale), runs on the
// leader, and does not use the HPA (which cannot scale to zero and syncs every 15 s).
//
// The load is every /fn/ replica's, summed (Loads, a LoadScraper in the operator). A /fn/ in this
// process pokes through Poke; one in another process holds its pokes for the LoadScraper, which
// polls every replica for them (WatchPokes) when Loads can.
type Scaler struct {
	Client    client.Client
	Instances activator.Source
	Loads     LoadReader
	Decider   *autoscale.Decider
	// Tick is how often every function is looked at (default 1 s).
	Tick time.Duration
	// Now replaces time.Now (tests; give the Decider the same clock).
	Now func() time.Time

	pokes chan types.NamespacedName
	// busy is when each function's instances were last seen busy, by this Scaler (only its loop
	// touches it): a replica whose load is no longer known must not make them look idle.
	busy map[string]map[string]time.Time
}

// LoadReader reads the load of every function, summed over the /fn/ replicas. An error means it
// knows none of them: the Scaler then decides nothing.
type LoadReader interface {
	Loads(ctx context.Context) (Loads, error)
}

// pokeWatcher is a LoadReader that also hears of requests held in other processes.
type pokeWatcher interface {
	WatchPokes(ctx context.Context, poke func(ns, name string))
}

var _ pokeWatcher = (*LoadScraper)(nil)

// Poke asks for a look at ns/name now (a request waits for an instance). It never blocks.
func (s *Scaler) Poke(ns, name string) {
	select {
	case s.pokeCh() <- types.NamespacedName{Namespace: ns, Name: name}:
	default: // a look is pending already, or the next tick comes soon
	}
}

func (s *Scaler) pokeCh() chan types.NamespacedName {
	if s.pokes == nil {
		panic("controllers: Scaler.Poke before NewScaler")
	}
	return s.pokes
}

// NewScaler makes a Scaler ready for Poke before it starts.
func NewScaler(s Scaler) *Scaler {
	s.pokes = make(chan types.NamespacedName, 64)
	s.busy = map[string]map[string]time.Time{}
	return &s
}

func (s *Scaler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Start scales until ctx ends (a manager.Runnable that needs the leader).
func (s *Scaler) Start(ctx context.Context) error {
	if w, ok := s.Loads.(pokeWatcher); ok {
		go w.WatchPokes(ctx, s.Poke)
	}
	t := time.NewTicker(cmp.Or(s.Tick, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-s.pokes:
			// Every poke pending is served by one read of the loads.
			keys := map[types.NamespacedName]bool{k: true}
			for more := true; more; {
				select {
				case k := <-s.pokes:
					keys[k] = true
				default:
					more = false
				}
			}
			s.scaleSome(ctx, keys)
		case <-t.C:
			s.scaleAll(ctx)
		}
	}
}

// loads reads the loads by function; ok is false when they are unknown (nothing may be decided).
func (s *Scaler) loads(ctx context.Context) (map[types.NamespacedName]activator.Load, bool, bool) {
	ls, err := s.Loads.Loads(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "reading the load of /fn/: scaling nothing")
		return nil, false, false
	}
	out := map[types.NamespacedName]activator.Load{}
	for _, l := range ls.Functions {
		out[types.NamespacedName{Namespace: l.Namespace, Name: l.Name}] = l
	}
	return out, ls.Partial, true
}

func (s *Scaler) scaleAll(ctx context.Context) {
	var fns slessv1.FunctionList
	if err := s.Client.List(ctx, &fns); err != nil {
		log.FromContext(ctx).Error(err, "listing functions to scale")
		return
	}
	loads, partial, ok := s.loads(ctx)
	if !ok {
		return
	}
	live := map[string]bool{}
	for i := range fns.Items {
		fn := &fns.Items[i]
		k := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
		live[k.String()] = true
		s.scale(ctx, fn, loads[k], partial)
	}
	for key := range s.busy {
		if !live[key] {
			delete(s.busy, key)
		}
	}
}

func (s *Scaler) scaleSome(ctx context.Context, keys map[types.NamespacedName]bool) {
	loads, partial, ok := s.loads(ctx)
	if !ok {
		return
	}
	for k := range keys {
		var fn slessv1.Function
		if err := s.Client.Get(ctx, k, &fn); err != nil {
			continue
		}
		s.scale(ctx, &fn, loads[k], partial)
	}
}

// scale decides one function's replicas and applies them. Functions not running (no image, being
// deleted, or switched off by their triggers: replicas 0 set by the FunctionReconciler) are left
// to the reconciler. With partial loads nothing is scaled down.
func (s *Scaler) scale(ctx context.Context, fn *slessv1.Function, load activator.Load, partial bool) {
	key := fn.Namespace + "/" + fn.Name
	if !fn.DeletionTimestamp.IsZero() {
		s.Decider.Forget(key)
		delete(s.busy, key)
		return
	}
	if fn.Status.Image == "" || fn.Status.IsDisabled() {
		return
	}
	var dep appsv1.Deployment
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(fn), &dep); err != nil || dep.Spec.Replicas == nil {
		return
	}
	s.Decider.Record(key, autoscale.Sample{InFlight: load.InFlight, Held: load.Held})
	insts, err := s.Instances.Instances(ctx, fn.Namespace, fn.Name)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing instances to scale", "function", key)
		return
	}
	active := map[string]activator.InstanceLoad{}
	for _, il := range load.Instances {
		active[il.ID] = il
	}
	in := autoscale.Input{Held: load.Held, Spec: autoscale.Spec{MinReplicas: int(fn.Spec.MinReplicas), MaxReplicas: int(fn.Spec.MaxReplicas),
		Concurrency: int(fn.Spec.Concurrency), IdleTimeout: time.Duration(fn.Spec.IdleTimeoutSec) * time.Second}.WithDefaults()}
	now := s.now()
	seen, busy := s.busy[key], map[string]time.Time{}
	for _, i := range insts {
		il, known := active[i.ID]
		if !i.Ready && !known {
			continue // starting
		}
		// The latest of: what the replicas report, now if it serves requests, and when this
		// Scaler last saw it busy (the replica that reported that may be gone since).
		last := il.LastActive
		if il.InFlight > 0 {
			last = now
		}
		if t := seen[i.ID]; t.After(last) {
			last = t
		}
		if !last.IsZero() {
			busy[i.ID] = last
		}
		in.Ready = append(in.Ready, autoscale.Instance{ID: i.ID, InFlight: il.InFlight, LastActive: last})
	}
	s.busy[key] = busy // instances no longer listed are gone
	current := int(*dep.Spec.Replicas)
	in.Starting = max(0, current-len(in.Ready))
	d := s.Decider.Decide(key, in)
	if d.Desired == current || (partial && d.Desired < current) {
		return
	}
	// The pods to stop go first: the ReplicaSet controller removes the cheapest.
	for _, id := range d.Stop {
		patch := []byte(`{"metadata":{"annotations":{"` + podDeletionCost + `":"-1000"}}}`)
		err := s.Client.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fn.Namespace, Name: id}}, client.RawPatch(types.MergePatchType, patch))
		if err != nil && !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "marking a pod to go first", "pod", id)
		}
	}
	n := int32(d.Desired)
	orig := dep.DeepCopy()
	dep.Spec.Replicas = &n
	if d.Desired > current {
		if dep.Annotations == nil {
			dep.Annotations = map[string]string{}
		}
		dep.Annotations[AnnotationScaledAt] = now.UTC().Format(time.RFC3339Nano)
	}
	if err := s.Client.Patch(ctx, &dep, client.MergeFrom(orig)); err != nil {
		log.FromContext(ctx).Error(err, "scaling", "function", key, "replicas", n)
		return
	}
	log.FromContext(ctx).Info("scaled", "function", key, "from", current, "to", n, "reason", d.Reason)
}
