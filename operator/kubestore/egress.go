package kubestore

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// egress keeps each namespace's egress rule in the annotation resources.AnnotationEgress of its
// Namespace (the API's account may update tenant namespaces, which the admission policy
// sless-writes limits to those sless manages); the controller's TenantReconciler renders it into
// the NetworkPolicy sless-egress.
type egress struct {
	c      client.Client
	tenant resources.TenantConfig
}

var _ objects.Egress = (*egress)(nil)

func (e *egress) Install() runspec.EgressInstall { return e.tenant.Egress.Install }

func (e *egress) Note() string {
	if e.tenant.Egress.Enforceable() {
		return ""
	}
	return resources.EgressNoteDNSOnly
}

func (e *egress) Choice(ctx context.Context, ns string) (*apiv1.EgressRule, error) {
	var obj corev1.Namespace
	if err := e.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
		return nil, notFound(err, "", ns)
	}
	return resources.EgressChoice(&obj), nil
}

func (e *egress) SetChoice(ctx context.Context, ns string, rule apiv1.EgressRule) error {
	v, err := json.Marshal(rule)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var obj corev1.Namespace
		if err := e.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			return notFound(err, "", ns)
		}
		if obj.Annotations[resources.AnnotationEgress] == string(v) {
			return nil
		}
		metav1.SetMetaDataAnnotation(&obj.ObjectMeta, resources.AnnotationEgress, string(v))
		return e.c.Update(ctx, &obj)
	})
}
