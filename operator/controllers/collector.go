package controllers

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/deps"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// OrphanedImagesConfigMap (in the operator's namespace) lists the deleted Functions whose
// finalizer gave up deleting their images: data key = a hash of the entry, value =
// "<namespace>/<name>/<uid> <image>".
const OrphanedImagesConfigMap = "sless-orphaned-images"

// orphans is that ConfigMap as a key-value store (the same shape as the pins). Reads go to the API
// server: the operator may not list or watch ConfigMaps, which a cached read would start.
func orphans(c client.Client, r client.Reader, ns string) *ConfigMapPins {
	return &ConfigMapPins{Client: c, Reader: r, Namespace: ns, Name: OrphanedImagesConfigMap}
}

func orphanKey(entry string) string {
	sum := sha256.Sum256([]byte(entry))
	return hex.EncodeToString(sum[:16])
}

// recordOrphan keeps what the finalizer could not delete of fn: its name and uid, and the image
// it last ran (which may predate version tags).
func recordOrphan(ctx context.Context, c client.Client, r client.Reader, ns string, fn *slessv1.Function) error {
	if ns == "" {
		return nil
	}
	entry := fn.Namespace + "/" + fn.Name + "/" + string(fn.UID) + " " + fn.Status.Image
	return orphans(c, r, ns).SetPin(ctx, orphanKey(entry), entry)
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete

// Collector deletes, in the background, what no Function references any more: dependency layers
// that no Function's current build mounts (with their pins, so the next build installs again), and
// the images finalizers gave up on. Function images of earlier versions are collected by the
// FunctionReconciler when a rollout is done; blobs by the registry's sweep at its start.
type Collector struct {
	Client   client.Client
	Reader   client.Reader // the API server, not the cache: every Function must be seen
	Pipeline *build.Pipeline
	// Pins of the dependency layers; nil collects no layers.
	Pins deps.Pins
	// Namespace is the operator's (OrphanedImagesConfigMap).
	Namespace string
	// Interval between collections (default 1 hour); the first runs at start.
	Interval time.Duration
}

// Start collects every Interval until ctx ends (a manager.Runnable: only the leader collects).
func (c *Collector) Start(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(c.Interval, time.Hour))
	defer t.Stop()
	for {
		if err := c.Collect(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "collecting unreferenced registry content")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Collect runs one collection.
func (c *Collector) Collect(ctx context.Context) error {
	reader := cmp.Or[client.Reader](c.Reader, c.Client)
	var errs []error
	if c.Pins != nil {
		var fns slessv1.FunctionList
		if err := reader.List(ctx, &fns); err != nil {
			return err
		}
		inUse := map[string]bool{}
		building := false
		for _, f := range fns.Items {
			if f.Status.Build != nil && f.Status.Build.DepsKey != "" {
				inUse[f.Status.Build.DepsKey] = true
			}
			// A build in progress may be about to mount a layer no Function records yet: collect
			// layers another time rather than make it install again.
			building = building || f.Status.Phase == apiv1.PhaseBuilding
		}
		if !building {
			deleted, err := c.Pipeline.CollectDeps(ctx, func(key string) bool { return inUse[key] }, c.Pins)
			if len(deleted) > 0 {
				log.FromContext(ctx).Info("deleted unreferenced dependency layers", "keys", deleted)
			}
			errs = append(errs, err)
		}
	}
	if c.Namespace != "" {
		var cm corev1.ConfigMap
		err := reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: OrphanedImagesConfigMap}, &cm)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		store := orphans(c.Client, reader, c.Namespace)
		for key, entry := range cm.Data {
			errs = append(errs, c.collectOrphan(ctx, reader, store, key, entry))
		}
	}
	return errors.Join(errs...)
}

// collectOrphan deletes the images of one deleted Function. When a Function of the same name
// exists again, its repository is its own: whatever it holds is left to its reconciler (a rebuild
// of the same code has the same digest as the recorded image).
func (c *Collector) collectOrphan(ctx context.Context, reader client.Reader, store *ConfigMapPins, key, entry string) error {
	id, image, _ := strings.Cut(entry, " ")
	parts := strings.SplitN(id, "/", 3)
	if len(parts) != 3 {
		return store.DropPin(ctx, key) // not ours to interpret
	}
	err := reader.Get(ctx, client.ObjectKey{Namespace: parts[0], Name: parts[1]}, &slessv1.Function{})
	if err == nil {
		return store.DropPin(ctx, key)
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = c.Pipeline.CollectImages(ctx, parts[0], parts[1])
	if err == nil && image != "" {
		err = c.Pipeline.DeleteImages(ctx, image)
	}
	if err != nil {
		return err
	}
	return store.DropPin(ctx, key)
}
