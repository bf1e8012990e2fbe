package kubestore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// The API writes a tenant's secret blind: a Secret it may create, replace and delete but not read
// (admission.yaml holds it to Secrets named sless-secret-… and labelled as a tenant's), and the
// secret's version and keys on the namespace (resources.SecretRecords), where GET answers from
// and the controller reads them.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;delete

// secrets is the objects.Secrets of the cluster c reaches.
type secrets struct{ c client.Client }

func (s secrets) namespace(ctx context.Context, ns string) (*corev1.Namespace, error) {
	var obj corev1.Namespace
	if err := s.c.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
		return nil, notFound(err, "", ns)
	}
	if obj.Labels[runspec.LabelManagedBy] != runspec.ManagedBy || !obj.DeletionTimestamp.IsZero() {
		return nil, fmt.Errorf("namespace %s: %w", ns, objects.ErrNotFound)
	}
	return &obj, nil
}

func meta(name string, r resources.SecretRecord) objects.SecretMeta {
	return objects.SecretMeta{Name: name, Keys: r.Keys, Version: r.Version, UpdatedAt: r.UpdatedAt}
}

func (s secrets) List(ctx context.Context, ns string) ([]objects.SecretMeta, error) {
	obj, err := s.namespace(ctx, ns)
	if err != nil {
		return nil, err
	}
	recs := resources.SecretRecords(obj)
	out := make([]objects.SecretMeta, 0, len(recs))
	for name, r := range recs {
		out = append(out, meta(name, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s secrets) Get(ctx context.Context, ns, name string) (objects.SecretMeta, error) {
	obj, err := s.namespace(ctx, ns)
	if err != nil {
		return objects.SecretMeta{}, err
	}
	r, ok := resources.SecretRecords(obj)[name]
	if !ok {
		return objects.SecretMeta{}, fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
	}
	return meta(name, r), nil
}

// Put writes the Secret, then moves the version on the namespace: a failure between the two
// leaves the new values in place under the old version (pods started from then on get them; the
// functions are not rolled), and the client's retry of the PUT completes it.
func (s secrets) Put(ctx context.Context, ns, name string, data map[string]string) (objects.SecretMeta, bool, error) {
	if err := apiv1.ValidSecretData(data); err != nil {
		return objects.SecretMeta{}, false, err
	}
	obj, err := s.namespace(ctx, ns)
	if err != nil {
		return objects.SecretMeta{}, false, err
	}
	recs := resources.SecretRecords(obj)
	if _, ok := recs[name]; !ok && len(recs) >= apiv1.MaxSecrets {
		return objects.SecretMeta{}, false, objects.TooManySecrets(ns)
	}
	want := resources.MakeTenantSecret(ns, name, data)
	if err := s.c.Create(ctx, want); apierrors.IsAlreadyExists(err) {
		// Replaced whole, without a read: the API's account may not read a Secret.
		want = resources.MakeTenantSecret(ns, name, data)
		err = s.c.Update(ctx, want)
		if err != nil {
			return objects.SecretMeta{}, false, fmt.Errorf("replacing secret %s/%s: %w", ns, name, err)
		}
	} else if err != nil {
		return objects.SecretMeta{}, false, fmt.Errorf("writing secret %s/%s: %w", ns, name, notFound(err, ns, name))
	}
	var rec resources.SecretRecord
	created := false
	err = s.updateNamespace(ctx, ns, func(recs map[string]resources.SecretRecord) (string, *resources.SecretRecord, error) {
		old, ok := recs[name]
		if !ok && len(recs) >= apiv1.MaxSecrets {
			return "", nil, objects.TooManySecrets(ns)
		}
		created = !ok
		rec = resources.SecretRecord{Version: old.Version + 1, Keys: slices.Sorted(maps.Keys(data)), UpdatedAt: time.Now().UTC().Truncate(time.Second)}
		return name, &rec, nil
	})
	if err != nil {
		return objects.SecretMeta{}, false, err
	}
	return meta(name, rec), created, nil
}

// Delete removes the Secret, then its record: a failure between the two leaves a record whose
// Secret is gone, which the next Delete completes.
func (s secrets) Delete(ctx context.Context, ns, name string) error {
	obj, err := s.namespace(ctx, ns)
	if err != nil {
		return err
	}
	if _, ok := resources.SecretRecords(obj)[name]; !ok {
		return fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
	}
	if err := s.c.Delete(ctx, resources.MakeTenantSecret(ns, name, nil)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting secret %s/%s: %w", ns, name, err)
	}
	return s.updateNamespace(ctx, ns, func(map[string]resources.SecretRecord) (string, *resources.SecretRecord, error) {
		return name, nil, nil
	})
}

// updateNamespace sets (or, given nil, removes) the record fn returns, on the namespace as it is
// now: a conflict reads it again.
func (s secrets) updateNamespace(ctx context.Context, ns string, fn func(map[string]resources.SecretRecord) (string, *resources.SecretRecord, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := s.namespace(ctx, ns)
		if err != nil {
			return err
		}
		name, rec, err := fn(resources.SecretRecords(obj))
		if err != nil {
			return err
		}
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		if rec == nil {
			delete(obj.Annotations, resources.SecretAnnotationPrefix+name)
		} else {
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			obj.Annotations[resources.SecretAnnotationPrefix+name] = string(b)
		}
		return s.c.Update(ctx, obj)
	})
}
