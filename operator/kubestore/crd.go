package kubestore

import (
	"context"
	"sort"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/objects"
)

// crd is one kind of sless object (a CRD of operator/api/v1alpha1) as an objects.Store: the shape
// functions, triggers and jobs share. O is the object's type, L its list's; S is the API's spec
// and St the status the reconcilers write.
type crd[S, St any, O client.Object, L client.ObjectList] struct {
	c client.Client
	// object makes an empty object named ns/name; list an empty list.
	object func(ns, name string) O
	list   func() L
	// items are a list's objects.
	items func(L) []O
	// name is a spec's name.
	name func(S) string
	// toObject is the API's view of an object.
	toObject func(O) objects.Object[S, St]
	// setSpec writes what of a spec the API may write into an object's spec (what may change on
	// an update: the CRD refuses changes to the rest).
	setSpec func(S, O)
	// create stores a new object (default c.Create).
	create func(ctx context.Context, c client.Client, obj O) error
}

func (s *crd[S, St, O, L]) List(ctx context.Context, ns string) ([]objects.Object[S, St], error) {
	l := s.list()
	if err := s.c.List(ctx, l, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	items := s.items(l)
	out := make([]objects.Object[S, St], 0, len(items))
	for _, o := range items {
		out = append(out, s.toObject(o))
	}
	sort.Slice(out, func(i, j int) bool { return s.name(out[i].Spec) < s.name(out[j].Spec) })
	return out, nil
}

func (s *crd[S, St, O, L]) Get(ctx context.Context, ns, name string) (objects.Object[S, St], error) {
	o := s.object(ns, name)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
		return objects.Object[S, St]{}, notFound(err, ns, name)
	}
	return s.toObject(o), nil
}

func (s *crd[S, St, O, L]) Create(ctx context.Context, ns string, spec S) (objects.Object[S, St], error) {
	o := s.object(ns, s.name(spec))
	s.setSpec(spec, o)
	create := s.create
	if create == nil {
		create = func(ctx context.Context, c client.Client, obj O) error { return c.Create(ctx, obj) }
	}
	if err := create(ctx, s.c, o); err != nil {
		return objects.Object[S, St]{}, notFound(err, ns, s.name(spec))
	}
	return s.toObject(o), nil
}

// Update applies fn to the object's spec as the API sees it, and writes the object only when
// what setSpec writes changed (the API server moves the generation).
func (s *crd[S, St, O, L]) Update(ctx context.Context, ns, name string, fn func(*S) error) (objects.Object[S, St], error) {
	var out objects.Object[S, St]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o := s.object(ns, name)
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
			return notFound(err, ns, name)
		}
		spec := s.toObject(o).Spec
		if err := fn(&spec); err != nil {
			return err
		}
		before := o.DeepCopyObject()
		s.setSpec(spec, o)
		if !equality.Semantic.DeepEqual(before, o) {
			if err := s.c.Update(ctx, o); err != nil {
				return err
			}
		}
		out = s.toObject(o)
		return nil
	})
	return out, err
}

func (s *crd[S, St, O, L]) Delete(ctx context.Context, ns, name string) error {
	return notFound(s.c.Delete(ctx, s.object(ns, name)), ns, name)
}

// pointers are the addresses of items' elements (a list's Items as objects).
func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
