package kubestore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// +kubebuilder:rbac:groups=sless.dev,resources=functions;triggers;functionjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges;secrets,verbs=create
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=create

// New is an api.Backend on the cluster c reaches; /fn/ goes where resolver says (an
// EndpointResolver in the operator).
func New(c client.Client, code codestore.Store, tenant resources.TenantConfig, resolver api.Resolver) api.Backend {
	return api.Backend{
		Namespaces:  &namespaces{c: c, tenant: tenant},
		Functions:   &functions{c: c},
		Triggers:    &triggers{c: c},
		Jobs:        &jobs{c: c},
		Invocations: api.NewInvocationRing(1000),
		Code:        code,
		Resolver:    resolver,
	}
}

// ServingView is what /fn/ reads per request, from c (the manager's cache in the operator).
func ServingView(c client.Client) *api.ServingView {
	return &api.ServingView{Functions: &functions{c: c}, Triggers: &triggers{c: c}}
}

func notFound(err error, ns, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s/%s: %w", ns, name, api.ErrAlreadyExists)
	}
	return err
}

// EndpointResolver routes /fn/ to a ready pod behind the function's Service, read from the
// Service's EndpointSlices (a cached client makes that a memory lookup). Going to the pod instead
// of the Service's virtual IP has two effects that matter for a rollout: a kept-alive connection
// is not pinned by conntrack to an old pod that is draining, so requests reach a new pod the
// moment it is Ready; and a pod that is ready is reachable before kube-proxy reprograms the
// virtual IP. Pods that are terminating or not ready are skipped; requests spread round-robin.
type EndpointResolver struct {
	Reader client.Reader
	next   atomic.Uint64
}

// Resolve returns http://<pod IP>:<port> of a ready endpoint, or *api.NotReadyError.
func (r *EndpointResolver) Resolve(ctx context.Context, ns, name string) (*url.URL, error) {
	var l discoveryv1.EndpointSliceList
	if err := r.Reader.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	var ready []string
	for _, sl := range l.Items {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port := int32(runspec.Port)
		for _, p := range sl.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "" || *p.Name == "http") {
				port = *p.Port
			}
		}
		for _, ep := range sl.Endpoints {
			if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || (ep.Conditions.Terminating != nil && *ep.Conditions.Terminating) {
				continue
			}
			for _, a := range ep.Addresses {
				ready = append(ready, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	if len(ready) == 0 {
		return nil, &api.NotReadyError{Reason: "no ready instance"}
	}
	sort.Strings(ready) // slices come in any order; the rotation should not depend on it
	return &url.URL{Scheme: "http", Host: ready[r.next.Add(1)%uint64(len(ready))]}, nil
}

// --- namespaces

type namespaces struct {
	c      client.Client
	tenant resources.TenantConfig
}

func (n *namespaces) Ensure(ctx context.Context, ns string) error {
	nsObj, objs := resources.TenantObjects(ns, n.tenant)
	if err := n.c.Create(ctx, nsObj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, o := range objs {
		if err := n.c.Create(ctx, o.(client.Object)); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (n *namespaces) Exists(ctx context.Context, ns string) (bool, error) {
	var obj corev1.Namespace
	err := n.c.Get(ctx, client.ObjectKey{Name: ns}, &obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil && obj.DeletionTimestamp.IsZero() && obj.Labels[runspec.LabelManagedBy] == runspec.ManagedBy, err
}

func (n *namespaces) Delete(ctx context.Context, ns string) error {
	err := n.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// --- functions

type functions struct{ c client.Client }

// functionSpec is the API's spec of a Function object.
func functionSpec(f *slessv1.Function) api.FunctionSpec {
	out := api.FunctionSpec{Name: f.Name, Runtime: f.Spec.Runtime, Entrypoint: f.Spec.Entrypoint, MemoryMB: int(f.Spec.MemoryMB),
		TimeoutSec: int(f.Spec.TimeoutSec), CodeSHA256: f.Spec.CodeSHA256}
	if len(f.Spec.Env) > 0 {
		out.EnvVars = map[string]string{}
		for _, e := range f.Spec.Env {
			out.EnvVars[e.Name] = e.Value
		}
	}
	return out
}

func toFunction(f *slessv1.Function) api.Function {
	s := f.Status
	st := apiv1.FunctionStatus{Phase: s.Phase, Image: s.Image, Message: s.Message}
	if s.LastBuiltAt != nil {
		t := s.LastBuiltAt.Time
		st.LastBuiltAt = &t
	}
	if s.Build != nil {
		st.Build = &apiv1.BuildInfo{DurationMS: s.Build.DurationMS, DepsKey: s.Build.DepsKey, DepsCached: s.Build.DepsCached}
	}
	return api.Function{Spec: functionSpec(f), Status: st, Generation: f.Generation, ObservedGeneration: s.ObservedGeneration,
		Deleting: !f.DeletionTimestamp.IsZero()}
}

// setSpec writes the API's spec into the object's spec (env vars sorted by name).
func setSpec(in api.FunctionSpec, f *slessv1.Function) {
	f.Spec.Runtime, f.Spec.Entrypoint = in.Runtime, in.Entrypoint
	f.Spec.MemoryMB, f.Spec.TimeoutSec = int32(in.MemoryMB), int32(in.TimeoutSec)
	f.Spec.CodeSHA256 = in.CodeSHA256
	keys := make([]string, 0, len(in.EnvVars))
	for k := range in.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f.Spec.Env = nil
	for _, k := range keys {
		f.Spec.Env = append(f.Spec.Env, corev1.EnvVar{Name: k, Value: in.EnvVars[k]})
	}
}

func (s *functions) List(ctx context.Context, ns string) ([]api.Function, error) {
	var l slessv1.FunctionList
	if err := s.c.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := make([]api.Function, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toFunction(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Name < out[j].Spec.Name })
	return out, nil
}

func (s *functions) Get(ctx context.Context, ns, name string) (api.Function, error) {
	var f slessv1.Function
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &f); err != nil {
		return api.Function{}, notFound(err, ns, name)
	}
	return toFunction(&f), nil
}

func (s *functions) Create(ctx context.Context, ns string, in api.FunctionSpec) (api.Function, error) {
	f := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns}}
	setSpec(in, f)
	if err := s.c.Create(ctx, f); err != nil {
		return api.Function{}, notFound(err, ns, in.Name)
	}
	return toFunction(f), nil
}

func (s *functions) Update(ctx context.Context, ns, name string, fn func(*api.FunctionSpec) error) (api.Function, error) {
	var out api.Function
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var f slessv1.Function
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &f); err != nil {
			return notFound(err, ns, name)
		}
		spec := functionSpec(&f)
		if err := fn(&spec); err != nil {
			return err
		}
		before := f.Spec.DeepCopy()
		setSpec(spec, &f)
		if !equality.Semantic.DeepEqual(before, &f.Spec) {
			if err := s.c.Update(ctx, &f); err != nil {
				return err
			}
		}
		out = toFunction(&f)
		return nil
	})
	return out, err
}

func (s *functions) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}), ns, name)
}
