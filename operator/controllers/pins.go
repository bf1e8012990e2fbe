package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/runspec"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete

// ConfigMapPins keeps the digest of each dependency layer key (deps.Pins) in one ConfigMap of the
// operator's namespace, where tenants cannot write: data key = the deps key, value = the digest.
// Reads go to the API server (Reader), not a cache: a pin must not be missed.
type ConfigMapPins struct {
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Name of the ConfigMap. The default is "sless-deps-pins".
	Name string
}

var _ deps.Pins = (*ConfigMapPins)(nil)

func (p *ConfigMapPins) key() client.ObjectKey {
	name := p.Name
	if name == "" {
		name = "sless-deps-pins"
	}
	return client.ObjectKey{Namespace: p.Namespace, Name: name}
}

// Pin returns the recorded digest of key ("" when none is).
func (p *ConfigMapPins) Pin(ctx context.Context, key string) (string, error) {
	var cm corev1.ConfigMap
	err := p.Reader.Get(ctx, p.key(), &cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	return cm.Data[key], err
}

// SetPin records digest for key (creating the ConfigMap the first time).
func (p *ConfigMapPins) SetPin(ctx context.Context, key, digest string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := p.Reader.Get(ctx, p.key(), &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.key().Name, Namespace: p.Namespace,
				Labels: map[string]string{runspec.LabelManagedBy: runspec.ManagedBy}}, Data: map[string]string{key: digest}}
			err = p.Client.Create(ctx, &cm)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, err) // created meanwhile: read again
			}
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = digest
		return p.Client.Update(ctx, &cm)
	})
}

// DropPin removes key from the ConfigMap (nothing to do when it is not there).
func (p *ConfigMapPins) DropPin(ctx context.Context, key string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := p.Reader.Get(ctx, p.key(), &cm)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, ok := cm.Data[key]; !ok {
			return nil
		}
		delete(cm.Data, key)
		return p.Client.Update(ctx, &cm)
	})
}
