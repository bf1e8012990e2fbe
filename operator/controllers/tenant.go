package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// TenantReconciler provisions every tenant namespace (a namespace labelled managed-by sless, which
// the API creates on POST …/ensure): its pod-security labels, LimitRange, ResourceQuota,
// NetworkPolicies and registry pull secret, as resources.TenantObjects says for Tenant. An object
// whose content differs is updated, one not labelled managed-by sless is left alone, and nothing is
// written when all is current; then the namespace's resources.AnnotationProvisioned says which
// tenant objects it has, which is what the API's ensure waits for. Every tenant is reconciled when
// the controller starts, so new quota values or a rotated pull secret reach tenants that never
// call ensure again.
type TenantReconciler struct {
	// Client reads and writes the tenant objects directly, not through the manager's cache: the
	// operator may get and write quotas, limit ranges, network policies and secrets but not list
	// or watch them (nor read a Secret at all). Nil: SetupWithManager makes one from the
	// manager's configuration.
	client.Client
	Tenant resources.TenantConfig
}

// tenantResync is how often a tenant is provisioned again although nothing of its namespace
// changed: a quota, limit range or network policy edited or deleted by hand comes back within it.
const tenantResync = 10 * time.Minute

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;update
// +kubebuilder:rbac:groups="",resources=resourcequotas;limitranges,verbs=get;create;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update
// Secrets: create and update (a whole object, which returns nothing of the old one), never read.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update

// Reconcile provisions one tenant namespace.
func (r *TenantReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := r.Get(ctx, req.NamespacedName, &ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ns.Labels[runspec.LabelManagedBy] != runspec.ManagedBy || !ns.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	sum, err := ProvisionTenant(ctx, r.Client, &ns, r.Tenant)
	if err != nil {
		return ctrl.Result{}, err
	}
	again := ctrl.Result{RequeueAfter: tenantResync}
	if ns.Annotations[resources.AnnotationProvisioned] == sum {
		return again, nil
	}
	return again, client.IgnoreNotFound(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Namespace
		if err := r.Get(ctx, req.NamespacedName, &cur); err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[resources.AnnotationProvisioned] = sum
		return r.Update(ctx, &cur)
	}))
}

// SetupWithManager watches the namespaces sless manages. Four tenants are provisioned at once, so
// that a new one is not long behind the pass over every tenant a (re)started controller makes.
func (r *TenantReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return err
		}
		r.Client = c
	}
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[runspec.LabelManagedBy] == runspec.ManagedBy })
	return ctrl.NewControllerManagedBy(mgr).Named("tenant").For(&corev1.Namespace{}, builder.WithPredicates(managed)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).Complete(r)
}

// pullSecretHash is the namespace annotation with the sha256 of the pull secret last written:
// the operator may not read Secrets, so this is how it knows whether the secret is current.
const pullSecretHash = "sless.dev/pull-secret-sha256"

// ProvisionTenant brings the objects of tenant namespace ns (which exists) to what
// resources.TenantObjects says for tenant, writing only what differs, and returns the digest of
// what it wrote (the value of resources.AnnotationProvisioned).
func ProvisionTenant(ctx context.Context, c client.Client, ns *corev1.Namespace, tenant resources.TenantConfig) (string, error) {
	// The namespace owner's egress rule, rendered within what the install permits.
	tenant.EgressChoice = resources.EgressChoice(ns)
	want, objs := resources.TenantObjects(ns.Name, tenant)
	h := sha256.New()
	labels := make([]string, 0, len(want.Labels))
	for k, v := range want.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	fmt.Fprintf(h, "labels %s\n", strings.Join(labels, ","))
	if !resources.HasLabels(ns, want.Labels) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur corev1.Namespace
			if err := c.Get(ctx, client.ObjectKeyFromObject(ns), &cur); err != nil {
				return err
			}
			for k, v := range want.Labels {
				resources.SetLabel(&cur, k, v)
			}
			if err := c.Update(ctx, &cur); err != nil {
				return err
			}
			*ns = cur
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	var secret *corev1.Secret
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Secret:
			secret = o
			fmt.Fprintf(h, "secret %s %s\n", o.Name, secretHash(o))
			continue
		case *corev1.ResourceQuota:
			err = ensureObject(ctx, c, o, &corev1.ResourceQuota{}, func(cur *corev1.ResourceQuota) bool {
				return equality.Semantic.DeepEqual(cur.Spec, o.Spec)
			}, func(cur *corev1.ResourceQuota) { cur.Spec = o.Spec })
		case *corev1.LimitRange:
			err = ensureObject(ctx, c, o, &corev1.LimitRange{}, func(cur *corev1.LimitRange) bool {
				return equality.Semantic.DeepEqual(cur.Spec, o.Spec)
			}, func(cur *corev1.LimitRange) { cur.Spec = o.Spec })
		case *networkingv1.NetworkPolicy:
			err = ensureObject(ctx, c, o, &networkingv1.NetworkPolicy{}, func(cur *networkingv1.NetworkPolicy) bool {
				return equality.Semantic.DeepEqual(cur.Spec, o.Spec) && cur.Annotations[resources.AnnotationEgressNote] == o.Annotations[resources.AnnotationEgressNote]
			}, func(cur *networkingv1.NetworkPolicy) {
				cur.Spec = o.Spec
				// The note tells the tenant (and an admin) what holds instead of its egress rule.
				if v, ok := o.Annotations[resources.AnnotationEgressNote]; ok {
					metav1.SetMetaDataAnnotation(&cur.ObjectMeta, resources.AnnotationEgressNote, v)
				} else {
					delete(cur.Annotations, resources.AnnotationEgressNote)
				}
			})
		default:
			err = fmt.Errorf("controllers: no way to provision a %T", o)
		}
		if err != nil {
			return "", err
		}
		spec, _ := json.Marshal(o)
		fmt.Fprintf(h, "%T %s\n", o, spec)
	}
	if secret != nil {
		if err := ensurePullSecret(ctx, c, ns, secret); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// ensureObject creates want, or updates the existing object of its name (read into cur) when same
// says its content differs, through set; with a retry when someone else wrote it meanwhile.
func ensureObject[T client.Object](ctx context.Context, c client.Client, want, cur T, same func(T) bool, set func(T)) error {
	return retry.OnError(retry.DefaultRetry, func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), cur); apierrors.IsNotFound(err) {
			return c.Create(ctx, want.DeepCopyObject().(client.Object))
		} else if err != nil {
			return err
		}
		if cur.GetLabels()[runspec.LabelManagedBy] != runspec.ManagedBy {
			return nil // not ours (an administrator's): left as it is
		}
		if same(cur) && resources.HasLabels(cur, want.GetLabels()) {
			return nil
		}
		set(cur)
		for k, v := range want.GetLabels() {
			resources.SetLabel(cur, k, v)
		}
		return c.Update(ctx, cur)
	})
}

// ensurePullSecret writes the pull secret when it is missing or, as the namespace's annotation
// says, not what it should be now. The operator may create and update Secrets but not read them:
// the update replaces the whole object (no resourceVersion), so nothing of the old one comes
// back, and the API server's admission policy (config/rbac/admission.yaml) refuses it for a
// Secret not labelled managed-by sless — then it is left alone, as in ensureObject.
func ensurePullSecret(ctx context.Context, c client.Client, nsObj *corev1.Namespace, want *corev1.Secret) error {
	sum := secretHash(want)
	err := c.Create(ctx, want.DeepCopy())
	switch {
	case err == nil:
	case !apierrors.IsAlreadyExists(err):
		return err
	case nsObj.Annotations[pullSecretHash] == sum:
		return nil
	default:
		if err := c.Update(ctx, want.DeepCopy()); err != nil {
			if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), notManaged) {
				return nil
			}
			return err
		}
	}
	if nsObj.Annotations[pullSecretHash] == sum {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur corev1.Namespace
		if err := c.Get(ctx, client.ObjectKeyFromObject(nsObj), &cur); err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[pullSecretHash] = sum
		return c.Update(ctx, &cur)
	})
}

// notManaged is in the admission policy's refusal of an update to an object sless does not manage.
const notManaged = "updates only the tenant objects it manages"

func secretHash(s *corev1.Secret) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", s.Type)
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%x\n", k, s.Data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
