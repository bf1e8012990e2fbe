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

// podDeletionCost is the annotation the ReplicaSet controller reads to choose which pods go
// first when a Deployment scales down (the lowest cost goes first).
const podDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// Scaler sets each running Function's Deployment replicas from its load, with the decider both
// backends share (autoscale): every Tick, and at once when /fn/ holds a request (Poke). It is the
// only writer of the replicas of a running function (FunctionReconciler.Autoscale), runs on the
// leader, and does not use the HPA (which cannot scale to zero and syncs every 15 s).
//
// The load comes from the activator of /fn/ in this process (Loads); with more API replicas,
// Loads must sum theirs.
type Scaler struct {
	Client    client.Client
	Instances activator.Source
	Loads     func() []activator.Load
	Decider   *autoscale.Decider
	// Tick is how often every function is looked at (default 1 s).
	Tick time.Duration

	pokes chan types.NamespacedName
}

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
	return &s
}

// Start scales until ctx ends (a manager.Runnable that needs the leader).
func (s *Scaler) Start(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(s.Tick, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-s.pokes:
			s.scaleOne(ctx, k)
		case <-t.C:
			s.scaleAll(ctx)
		}
	}
}

func (s *Scaler) loads() map[types.NamespacedName]activator.Load {
	out := map[types.NamespacedName]activator.Load{}
	for _, l := range s.Loads() {
		out[types.NamespacedName{Namespace: l.Namespace, Name: l.Name}] = l
	}
	return out
}

func (s *Scaler) scaleAll(ctx context.Context) {
	var fns slessv1.FunctionList
	if err := s.Client.List(ctx, &fns); err != nil {
		log.FromContext(ctx).Error(err, "listing functions to scale")
		return
	}
	loads := s.loads()
	for i := range fns.Items {
		fn := &fns.Items[i]
		k := types.NamespacedName{Namespace: fn.Namespace, Name: fn.Name}
		s.scale(ctx, fn, loads[k])
	}
}

func (s *Scaler) scaleOne(ctx context.Context, k types.NamespacedName) {
	var fn slessv1.Function
	if err := s.Client.Get(ctx, k, &fn); err != nil {
		return
	}
	s.scale(ctx, &fn, s.loads()[k])
}

// scale decides one function's replicas and applies them. Functions not running (no image, being
// deleted, or switched off by their triggers: replicas 0 set by the FunctionReconciler) are left
// to the reconciler.
func (s *Scaler) scale(ctx context.Context, fn *slessv1.Function, load activator.Load) {
	key := fn.Namespace + "/" + fn.Name
	if !fn.DeletionTimestamp.IsZero() {
		s.Decider.Forget(key)
		return
	}
	if fn.Status.Image == "" || fn.Status.Message == msgDisabledByTriggers {
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
	for _, i := range insts {
		il, known := active[i.ID]
		if !i.Ready && !known {
			continue // starting
		}
		in.Ready = append(in.Ready, autoscale.Instance{ID: i.ID, InFlight: il.InFlight, LastActive: il.LastActive})
	}
	current := int(*dep.Spec.Replicas)
	in.Starting = max(0, current-len(in.Ready))
	d := s.Decider.Decide(key, in)
	if d.Desired == current {
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
	if err := s.Client.Patch(ctx, &dep, client.MergeFrom(orig)); err != nil {
		log.FromContext(ctx).Error(err, "scaling", "function", key, "replicas", n)
		return
	}
	log.FromContext(ctx).Info("scaled", "function", key, "from", current, "to", n, "reason", d.Reason)
}

// msgDisabledByTriggers is the status message of a function its http triggers switch off.
const msgDisabledByTriggers = "stopped: disabled by its http triggers"
