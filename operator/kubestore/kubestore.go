package kubestore

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// +kubebuilder:rbac:groups=sless.dev,resources=functions;triggers;functionjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// The quota admission's status wait (createUnderQuota) patches the namespace's quota.
// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;patch

// New is the objects.Backend of the cluster c reaches, whole: the stores on the CRDs (read and
// written through c, a direct client, so that a create is seen by the next get), tenant
// namespaces, /fn/'s view of functions and their pods, and what the options add (logs, the
// invocation history, the scaler); see each option for its default.
func New(c client.Client, opts ...Option) (objects.Backend, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return objects.Backend{}, err
	}
	b := objects.Backend{
		Namespaces:  &namespaces{c: c, tenant: o.tenant, provisionTimeout: o.provisionTimeout},
		Functions:   functions(c),
		Triggers:    triggers(c),
		Jobs:        jobs(c),
		Secrets:     secrets{c: c},
		Invocations: o.invocations,
		Code:        o.code,
		Resolver:    o.resolver,
		Logs:        o.logs,
		Scaler:      o.scaler,
		Egress:      &egress{c: c, tenant: o.tenant},
		// rabbitmq triggers run in each namespace's consumer Deployment (the ConsumerReconciler).
		TriggerTypes: []apiv1.TriggerType{apiv1.TriggerHTTP, apiv1.TriggerCron, apiv1.TriggerRabbitMQ},
	}
	if o.runtimeImages != nil {
		b.RuntimeImages = o.runtimeImages
	}
	if b.Invocations == nil {
		b.Invocations = objects.NewInvocationRing(DefaultInvocationRing)
	}
	serving := c
	if o.cache != nil {
		// /fn/ reads functions and triggers from the cache, not with two API round trips per request.
		serving = o.cache
		b.Serving = &objects.ServingView{Functions: functions(serving), Triggers: triggers(serving)}
	}
	if b.Resolver == nil {
		// /fn/ goes to the pods behind the function's Service, not to its virtual IP, and probes
		// those that are not ready yet itself.
		endpoints := &EndpointResolver{Reader: serving}
		b.Resolver, b.Instances = endpoints, endpoints
	}
	if o.logsConfig != nil {
		logs, err := NewLogs(o.logsConfig, o.code)
		if err != nil {
			return objects.Backend{}, err
		}
		b.Logs = logs
	}
	return b, nil
}

// notFound maps the API server's refusals to the API's errors.
func notFound(err error, ns, name string) error {
	// The ResourceQuota admission's refusal ("… is forbidden: exceeded quota: sless-quota,
	// requested: count/functions.sless.dev=1, used: …, limited: …"): nothing was stored.
	if _, detail, ok := strings.Cut(errString(err), "exceeded quota: "); ok && apierrors.IsForbidden(err) {
		return fmt.Errorf("%w: %s (the namespace's ResourceQuota: delete something first, or ask the platform's operator to raise it)", objects.ErrQuotaExceeded, detail)
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrAlreadyExists)
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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

var _ activator.ScaleLimiter = (*EndpointResolver)(nil)

// ScaleLimited reports whether the function's scale-up is stopped by the tenant's quota (its
// ScaleLimited condition, from the cache): /fn/ then answers requests it holds instead of letting
// them wait for a pod that cannot be created.
func (r *EndpointResolver) ScaleLimited(ctx context.Context, ns, name string) bool {
	var fn slessv1.Function
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fn); err != nil {
		return false
	}
	return fn.Status.IsScaleLimited()
}

// Resolve returns http://<pod IP>:<port> of a ready endpoint, or *objects.NotReadyError.
func (r *EndpointResolver) Resolve(ctx context.Context, ns, name string) (*url.URL, error) {
	insts, err := r.Instances(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	var ready []*url.URL
	for _, i := range insts {
		if i.Ready {
			ready = append(ready, i.URL)
		}
	}
	if len(ready) == 0 {
		return nil, &objects.NotReadyError{Reason: "no ready instance"}
	}
	// Slices come in any order; the rotation should not depend on it.
	sort.Slice(ready, func(i, j int) bool { return ready[i].Host < ready[j].Host })
	return ready[r.next.Add(1)%uint64(len(ready))], nil
}

// Instances lists the function's pods behind its Service for /fn/'s activator: ready ones, and
// those not ready yet that have an address (the activator probes them itself, so a new pod serves
// as soon as its runtime answers, not a kubelet readiness period later). Terminating pods are not
// listed: they finish what they have and get nothing new.
func (r *EndpointResolver) Instances(ctx context.Context, ns, name string) ([]activator.Instance, error) {
	var l discoveryv1.EndpointSliceList
	if err := r.Reader.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	var out []activator.Instance
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
			if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				continue
			}
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			for _, a := range ep.Addresses {
				id := a
				if ep.TargetRef != nil && ep.TargetRef.Name != "" {
					id = ep.TargetRef.Name
				}
				out = append(out, activator.Instance{ID: id, Ready: ready,
					URL: &url.URL{Scheme: "http", Host: net.JoinHostPort(a, strconv.Itoa(int(port)))}})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// --- namespaces

type namespaces struct {
	c                client.Client
	tenant           resources.TenantConfig
	provisionTimeout time.Duration
}

// Ensure creates the tenant namespace, labelled as sless's (pod security "restricted"), and
// answers once the controller's TenantReconciler has provisioned it (resources.AnnotationProvisioned:
// its quota, limits, network policies and pull secret exist), within the provision timeout
// (WithProvisionTimeout); beyond, *objects.NotReadyError: the namespace is there and ensure may be
// called again. A namespace provisioned before answers at once.
func (n *namespaces) Ensure(ctx context.Context, ns string) error {
	want, _ := resources.TenantObjects(ns, n.tenant)
	cur, err := ensureNamespace(ctx, n.c, want)
	if err != nil {
		return err
	}
	if cur.Annotations[resources.AnnotationProvisioned] != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.provisionTimeout)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, false, func(ctx context.Context) (bool, error) {
		var obj corev1.Namespace
		if err := n.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return obj.Annotations[resources.AnnotationProvisioned] != "", nil
	})
	if err != nil {
		return &objects.NotReadyError{Reason: fmt.Sprintf("namespace %s is created and still being provisioned (its quota, limits and network policies) after %v; call ensure again", ns, n.provisionTimeout)}
	}
	return nil
}

// ensureNamespace creates the namespace, or adds the labels it lacks to an existing one of ours.
// A namespace of that name that sless does not manage, or one being deleted, is a conflict.
func ensureNamespace(ctx context.Context, c client.Client, want *corev1.Namespace) (*corev1.Namespace, error) {
	var cur corev1.Namespace
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &cur); apierrors.IsNotFound(err) {
			cur = *want.DeepCopy()
			return c.Create(ctx, &cur)
		} else if err != nil {
			return err
		}
		switch {
		case cur.Labels[runspec.LabelManagedBy] != runspec.ManagedBy:
			return fmt.Errorf("namespace %s exists and is not managed by sless (label %s=%s): %w", want.Name, runspec.LabelManagedBy, runspec.ManagedBy, objects.ErrConflict)
		case !cur.DeletionTimestamp.IsZero():
			return fmt.Errorf("namespace %s is being deleted; ensure it again once it is gone: %w", want.Name, objects.ErrConflict)
		case resources.HasLabels(&cur, want.Labels):
			return nil
		}
		for k, v := range want.Labels {
			resources.SetLabel(&cur, k, v)
		}
		return c.Update(ctx, &cur)
	})
	return &cur, err
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

// functions are Function objects.
func functions(c client.Client) *crd[objects.FunctionSpec, lifecycle.FunctionStatus, *slessv1.Function, *slessv1.FunctionList] {
	return &crd[objects.FunctionSpec, lifecycle.FunctionStatus, *slessv1.Function, *slessv1.FunctionList]{c: c,
		object: func(ns, name string) *slessv1.Function {
			return &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		},
		list:     func() *slessv1.FunctionList { return &slessv1.FunctionList{} },
		items:    func(l *slessv1.FunctionList) []*slessv1.Function { return pointers(l.Items) },
		name:     func(s objects.FunctionSpec) string { return s.Name },
		toObject: toFunction,
		setSpec:  setSpec,
		create: func(ctx context.Context, c client.Client, f *slessv1.Function) error {
			return createUnderQuota(ctx, c, f)
		},
	}
}

// functionSpec is the API's spec of a Function object.
func functionSpec(f *slessv1.Function) objects.FunctionSpec {
	out := objects.FunctionSpec{Name: f.Name, Runtime: f.Spec.Runtime, Entrypoint: f.Spec.Entrypoint, MemoryMB: int(f.Spec.MemoryMB),
		TimeoutSec: int(f.Spec.TimeoutSec), CodeSHA256: f.Spec.CodeSHA256, MinReplicas: int(f.Spec.MinReplicas),
		MaxReplicas: int(f.Spec.MaxReplicas), Concurrency: int(f.Spec.Concurrency), IdleTimeoutSec: int(f.Spec.IdleTimeoutSec)}
	if len(f.Spec.Env) > 0 {
		out.EnvVars = map[string]string{}
		for _, e := range f.Spec.Env {
			out.EnvVars[e.Name] = e.Value
		}
	}
	if len(f.Spec.SecretEnv) > 0 {
		out.SecretEnv = map[string]string{}
		for _, e := range f.Spec.SecretEnv {
			out.SecretEnv[e.Name] = e.Secret + "/" + e.Key
		}
	}
	if len(f.Spec.SecretFiles) > 0 {
		out.SecretFiles = map[string]string{}
		for _, e := range f.Spec.SecretFiles {
			out.SecretFiles[e.Path] = e.Secret
		}
	}
	if a := f.Spec.Async; a != nil {
		out.Async = &apiv1.AsyncConfig{Enabled: a.Enabled, MaxAgeSec: int(a.MaxAgeSec), MaxQueued: int(a.MaxQueued)}
		if a.MaxRetries != nil {
			n := int(*a.MaxRetries)
			out.Async.MaxRetries = &n
		}
	}
	return out
}

func toFunction(f *slessv1.Function) objects.Function {
	return objects.Function{Spec: functionSpec(f), Status: f.Status.Lifecycle(), Generation: f.Generation,
		ObservedGeneration: f.Status.ObservedGeneration, Deleting: !f.DeletionTimestamp.IsZero()}
}

// setSpec writes the API's spec into the object's spec (env vars sorted by name).
func setSpec(in objects.FunctionSpec, f *slessv1.Function) {
	f.Spec.Runtime, f.Spec.Entrypoint = in.Runtime, in.Entrypoint
	f.Spec.MemoryMB, f.Spec.TimeoutSec = int32(in.MemoryMB), int32(in.TimeoutSec)
	f.Spec.MinReplicas, f.Spec.MaxReplicas = int32(in.MinReplicas), int32(in.MaxReplicas)
	f.Spec.Concurrency, f.Spec.IdleTimeoutSec = int32(in.Concurrency), int32(in.IdleTimeoutSec)
	f.Spec.CodeSHA256 = in.CodeSHA256
	f.Spec.Async = nil
	if a := in.Async; a != nil {
		f.Spec.Async = &slessv1.AsyncConfig{Enabled: a.Enabled, MaxAgeSec: int32(a.MaxAgeSec), MaxQueued: int32(a.MaxQueued)}
		if a.MaxRetries != nil {
			n := int32(*a.MaxRetries)
			f.Spec.Async.MaxRetries = &n
		}
	}
	keys := make([]string, 0, len(in.EnvVars))
	for k := range in.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	f.Spec.Env = nil
	for _, k := range keys {
		f.Spec.Env = append(f.Spec.Env, corev1.EnvVar{Name: k, Value: in.EnvVars[k]})
	}
	f.Spec.SecretEnv = nil
	for _, k := range slices.Sorted(maps.Keys(in.SecretEnv)) {
		secret, key, _ := strings.Cut(in.SecretEnv[k], "/")
		f.Spec.SecretEnv = append(f.Spec.SecretEnv, slessv1.SecretEnvVar{Name: k, Secret: secret, Key: key})
	}
	f.Spec.SecretFiles = nil
	for _, p := range slices.Sorted(maps.Keys(in.SecretFiles)) {
		f.Spec.SecretFiles = append(f.Spec.SecretFiles, slessv1.SecretFiles{Path: p, Secret: in.SecretFiles[p]})
	}
}

// quotaStatusWait bounds how long a create waits for the quota controller to count a quota it
// has not seen yet: a namespace ensured a moment ago, a quota that gained a resource, or the
// Function CRD itself, which kube-controller-manager learns of on its discovery resync (30 s).
const quotaStatusWait = 45 * time.Second

// createUnderQuota creates obj, waiting while the ResourceQuota admission refuses it only because
// kube-controller-manager has not computed the quota's usage of a resource ("status unknown for
// quota"): nothing is stored meanwhile, and the refusal is the platform's timing, not the caller's.
// The quota controller counts a resource it learnt of later (the Function CRD: its discovery
// resync runs every 30 s) only when the quota's spec changes or on its full resync (5 min by
// default), so each wait also changes the spec and back (a limit of 0 on a resource nothing
// creates), which makes it count again.
func createUnderQuota(ctx context.Context, c client.Client, obj client.Object) error {
	deadline := time.Now().Add(quotaStatusWait)
	wait := 50 * time.Millisecond
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: "sless-quota"}}
	for {
		err := c.Create(ctx, obj)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "status unknown for quota") || time.Now().After(deadline) {
			return err
		}
		for _, v := range []string{`"0"`, `null`} {
			c.Patch(ctx, quota, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"hard":{"count/recount.sless.dev":`+v+`}}}`)))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
