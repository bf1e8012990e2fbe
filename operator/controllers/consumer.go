package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sless-dev/sless/api/apiv1"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

// ConsumerConfig is what the namespaces' rabbitmq consumers need (Config.Consumer).
type ConsumerConfig struct {
	resources.ConsumerConfig
	// Key is the install's event key: each namespace's consumer gets apiv1.EventToken(Key, ns),
	// which the API (api.WithEventKey, the same key) accepts for that namespace's functions only.
	Key []byte
}

// ConsumerReconciler keeps each tenant namespace's rabbitmq consumer (resources.MakeConsumer…)
// in step with its enabled rabbitmq triggers: created with the first, its Deployment updated when
// the secrets they name change, everything deleted with the last. The consumer pod itself, not
// this controller (which reads no Secret), connects to the brokers.
type ConsumerReconciler struct {
	// Client writes; reads of kinds the manager does not cache (ServiceAccounts, Roles,
	// RoleBindings, NetworkPolicies) go through Direct.
	Client client.Client
	Direct client.Client
	Config ConsumerConfig
}

// +kubebuilder:rbac:groups=sless.dev,resources=triggers,verbs=get;list;watch
// +kubebuilder:rbac:groups=sless.dev,resources=triggers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// annotationSpec on the consumer's pod template hashes the template sless wants: a difference
// (another secret mounted, another image) replaces the pod. annotationToken on the Deployment
// hashes the token its Secret was last written with (the Secret is written blind).
const (
	annotationConsumerSpec  = "sless.dev/consumer-spec"
	annotationConsumerToken = "sless.dev/event-token-sum"
)

// Reconcile brings namespace req.Namespace's consumer to its triggers.
func (r *ConsumerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	var list slessv1.TriggerList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, err
	}
	consumed := resources.ConsumedTriggers(list.Items)
	if len(consumed) == 0 {
		return ctrl.Result{}, r.remove(ctx, ns)
	}
	if len(r.Config.Key) == 0 || r.Config.Image == "" {
		// Nothing could run them: say so on each (the consumer would write the rest).
		for _, t := range consumed {
			if t.Status.LastError != errNoConsumer {
				patch, _ := json.Marshal(map[string]any{"status": map[string]any{"connected": false, "lastError": errNoConsumer}})
				if err := r.Client.Status().Patch(ctx, &t, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
					return ctrl.Result{}, err
				}
			}
		}
		return ctrl.Result{}, nil
	}
	cfg := r.Config.ConsumerConfig
	if len(cfg.KubeAPI) == 0 {
		var err error
		if cfg.KubeAPI, err = r.kubeAPI(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	sa, role, rb, np := resources.MakeConsumerServiceAccount(ns), resources.MakeConsumerRole(ns), resources.MakeConsumerRoleBinding(ns), resources.MakeConsumerNetworkPolicy(ns, cfg)
	if err := ensureObject(ctx, r.Direct, sa, &corev1.ServiceAccount{}, func(*corev1.ServiceAccount) bool { return true }, func(*corev1.ServiceAccount) {}); err != nil {
		return ctrl.Result{}, fmt.Errorf("the consumer's ServiceAccount: %w", err)
	}
	if err := ensureObject(ctx, r.Direct, role, &rbacv1.Role{}, func(c *rbacv1.Role) bool { return equality.Semantic.DeepEqual(c.Rules, role.Rules) },
		func(c *rbacv1.Role) { c.Rules = role.Rules }); err != nil {
		return ctrl.Result{}, fmt.Errorf("the consumer's Role: %w", err)
	}
	if err := ensureObject(ctx, r.Direct, rb, &rbacv1.RoleBinding{}, func(c *rbacv1.RoleBinding) bool {
		return equality.Semantic.DeepEqual(c.Subjects, rb.Subjects) && c.RoleRef == rb.RoleRef
	}, func(c *rbacv1.RoleBinding) { c.Subjects = rb.Subjects }); err != nil {
		return ctrl.Result{}, fmt.Errorf("the consumer's RoleBinding: %w", err)
	}
	if err := ensureObject(ctx, r.Direct, np, &networkingv1.NetworkPolicy{}, func(c *networkingv1.NetworkPolicy) bool {
		return equality.Semantic.DeepEqual(c.Spec, np.Spec)
	}, func(c *networkingv1.NetworkPolicy) { c.Spec = np.Spec }); err != nil {
		return ctrl.Result{}, fmt.Errorf("the consumer's NetworkPolicy: %w", err)
	}

	token := apiv1.EventToken(r.Config.Key, ns)
	tsum := sha256.Sum256([]byte(token))
	tokenSum := hex.EncodeToString(tsum[:8])
	want := resources.MakeConsumerDeployment(ns, consumed, cfg)
	spec, _ := json.Marshal(want.Spec.Template)
	ssum := sha256.Sum256(spec)
	want.Spec.Template.Annotations = map[string]string{annotationConsumerSpec: hex.EncodeToString(ssum[:8])}
	live := &appsv1.Deployment{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	// Written blind (this account reads no Secret): created whenever missing (a hand deletion is
	// repaired at the next reconcile), replaced whole when the token changed.
	secret := resources.MakeConsumerSecret(ns, token)
	switch serr := r.Client.Create(ctx, secret.DeepCopy()); {
	case serr == nil:
	case !apierrors.IsAlreadyExists(serr):
		return ctrl.Result{}, fmt.Errorf("the consumer's Secret: %w", serr)
	case err != nil || live.Annotations[annotationConsumerToken] != tokenSum:
		if serr := r.Client.Update(ctx, secret.DeepCopy()); serr != nil {
			return ctrl.Result{}, fmt.Errorf("the consumer's Secret: %w", serr)
		}
	}
	live = &appsv1.Deployment{}
	live.Namespace, live.Name = ns, resources.ConsumerName
	_, err = controllerutil.CreateOrUpdate(ctx, r.Client, live, func() error {
		for k, v := range want.Labels {
			resources.SetLabel(live, k, v)
		}
		if live.Annotations == nil {
			live.Annotations = map[string]string{}
		}
		live.Annotations[annotationConsumerToken] = tokenSum
		live.Spec.Replicas, live.Spec.Strategy = want.Spec.Replicas, want.Spec.Strategy
		if live.Spec.Selector == nil {
			live.Spec.Selector = want.Spec.Selector
		}
		if live.Spec.Template.Annotations[annotationConsumerSpec] != want.Spec.Template.Annotations[annotationConsumerSpec] {
			live.Spec.Template = want.Spec.Template
		}
		return nil
	})
	// Again now and then: an object edited or deleted by hand, a moved Kubernetes API endpoint.
	return ctrl.Result{RequeueAfter: consumerResync}, err
}

// consumerResync is how often a namespace's consumer objects are brought back to what they
// should be although nothing sless watches changed.
const consumerResync = 10 * time.Minute

// errNoConsumer is a rabbitmq trigger's last error on an install that cannot run consumers.
const errNoConsumer = "this installation runs no rabbitmq consumers: sless-operator needs --operator-image and --event-key-file"

// remove deletes the namespace's consumer objects (those that exist), the Deployment first.
func (r *ConsumerReconciler) remove(ctx context.Context, ns string) error {
	var errs []error
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}, &networkingv1.NetworkPolicy{}, &rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}} {
		o.SetNamespace(ns)
		o.SetName(resources.ConsumerName)
		c := r.Direct
		if _, ok := o.(*appsv1.Deployment); ok {
			c = r.Client
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
				// Nothing was made here (most namespaces), or a creation was cut short before
				// its Deployment: its account says which.
				err := r.Direct.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.ConsumerName}, &corev1.ServiceAccount{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				continue
			}
		}
		if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// kubeAPI are the Kubernetes API server's endpoints (the kubernetes Service's EndpointSlice in
// default), which the consumer's NetworkPolicy lets it reach.
func (r *ConsumerReconciler) kubeAPI(ctx context.Context) ([]netip.AddrPort, error) {
	var slice discoveryv1.EndpointSlice
	if err := r.Direct.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &slice); err != nil {
		return nil, fmt.Errorf("reading the Kubernetes API's endpoints (EndpointSlice default/kubernetes): %w", err)
	}
	var out []netip.AddrPort
	for _, p := range slice.Ports {
		if p.Port == nil {
			continue
		}
		for _, ep := range slice.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.AddrPortFrom(ip, uint16(*p.Port)))
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the Kubernetes API's EndpointSlice default/kubernetes lists no address")
	}
	return out, nil
}

// SetupWithManager watches Triggers and the consumer Deployments, each mapped to its namespace's
// one request.
func (r *ConsumerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Direct == nil {
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return err
		}
		r.Direct = direct
	}
	toNamespace := func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: resources.ConsumerName}}}
	}
	consumerOnly := func(ctx context.Context, o client.Object) []reconcile.Request {
		if o.GetName() != resources.ConsumerName {
			return nil
		}
		return toNamespace(ctx, o)
	}
	// Only rabbitmq triggers, and only their creation, deletion and spec changes (enabled): the
	// consumer's status writes (every half second on a busy queue) change nothing here.
	rabbitmqOnly := predicate.NewPredicateFuncs(func(o client.Object) bool {
		t, ok := o.(*slessv1.Trigger)
		return ok && t.Spec.Type == apiv1.TriggerRabbitMQ
	})
	return ctrl.NewControllerManagedBy(mgr).Named("consumer").
		Watches(&slessv1.Trigger{}, handler.EnqueueRequestsFromMapFunc(toNamespace),
			builder.WithPredicates(rabbitmqOnly, predicate.GenerationChangedPredicate{})).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(consumerOnly)).
		Complete(r)
}
