// Package memstore is an in-memory implementation of the API's stores, for unit tests only: it
// keeps nothing across restarts and builds nothing.
package memstore

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// Store is a Store[T] in a map; name reads T's name.
type Store[T any] struct {
	mu   sync.Mutex
	m    map[string]map[string]T
	name func(T) string
}

// New makes an empty store.
func New[T any](name func(T) string) *Store[T] {
	return &Store[T]{m: map[string]map[string]T{}, name: name}
}

var _ api.Store[apiv1.Function] = (*Store[apiv1.Function])(nil)

// List returns the namespace's objects sorted by name.
func (s *Store[T]) List(_ context.Context, ns string) ([]T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []T{}
	for _, v := range s.m[ns] {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return s.name(out[i]) < s.name(out[j]) })
	return out, nil
}

// Get returns one object or api.ErrNotFound.
func (s *Store[T]) Get(_ context.Context, ns, name string) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		var zero T
		return zero, fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
	}
	return v, nil
}

// Create adds obj or returns api.ErrAlreadyExists.
func (s *Store[T]) Create(_ context.Context, ns string, obj T) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.name(obj)
	if _, ok := s.m[ns][n]; ok {
		var zero T
		return zero, fmt.Errorf("%s/%s: %w", ns, n, api.ErrAlreadyExists)
	}
	if s.m[ns] == nil {
		s.m[ns] = map[string]T{}
	}
	s.m[ns][n] = obj
	return obj, nil
}

// Update applies fn under the lock.
func (s *Store[T]) Update(_ context.Context, ns, name string, fn func(*T) error) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		var zero T
		return zero, fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
	}
	if err := fn(&v); err != nil {
		var zero T
		return zero, err
	}
	s.m[ns][name] = v
	return v, nil
}

// Delete removes one object or returns api.ErrNotFound.
func (s *Store[T]) Delete(_ context.Context, ns, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ns][name]; !ok {
		return fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
	}
	delete(s.m[ns], name)
	return nil
}

// DropNamespace removes every object of ns.
func (s *Store[T]) DropNamespace(ns string) {
	s.mu.Lock()
	delete(s.m, ns)
	s.mu.Unlock()
}

// Namespaces is a set of namespace names that also clears the stores of a deleted namespace.
type Namespaces struct {
	mu     sync.Mutex
	set    map[string]bool
	onDrop []func(ns string)
}

var _ api.Namespaces = (*Namespaces)(nil)

// Ensure adds ns.
func (n *Namespaces) Ensure(_ context.Context, ns string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.set == nil {
		n.set = map[string]bool{}
	}
	n.set[ns] = true
	return nil
}

// Exists reports whether ns was ensured.
func (n *Namespaces) Exists(_ context.Context, ns string) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.set[ns], nil
}

// Delete removes ns and what is left in it.
func (n *Namespaces) Delete(_ context.Context, ns string) error {
	n.mu.Lock()
	delete(n.set, ns)
	drops := n.onDrop
	n.mu.Unlock()
	for _, f := range drops {
		f(ns)
	}
	return nil
}

// Backend is a complete in-memory backend around a code store and a resolver.
func Backend(code api.CodeStore, resolver api.Resolver) (api.Backend, *Stores) {
	st := &Stores{
		Functions: New(func(f apiv1.Function) string { return f.Name }),
		Triggers:  New(func(t apiv1.Trigger) string { return t.Name }),
		Jobs:      New(func(j apiv1.Job) string { return j.Name }),
	}
	st.Namespaces = &Namespaces{onDrop: []func(string){st.Functions.DropNamespace, st.Triggers.DropNamespace, st.Jobs.DropNamespace}}
	return api.Backend{
		Namespaces: st.Namespaces, Functions: st.Functions, Triggers: st.Triggers, Jobs: st.Jobs,
		Invocations: api.NewInvocationRing(1000), Code: code, Resolver: resolver,
	}, st
}

// Stores gives tests direct access to the state behind a Backend.
type Stores struct {
	Namespaces *Namespaces
	Functions  *Store[apiv1.Function]
	Triggers   *Store[apiv1.Trigger]
	Jobs       *Store[apiv1.Job]
}
