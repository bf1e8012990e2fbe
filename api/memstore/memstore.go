package memstore

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// Store is an objects.Store in a map; name reads a spec's name.
type Store[S, St any] struct {
	mu   sync.Mutex
	m    map[string]map[string]objects.Object[S, St]
	name func(S) string
	max  int    // objects per namespace; 0: no cap
	kind string // what they are, plural, for the quota's message
}

// SetMaxPerNamespace caps the objects (kind, plural: "functions") one namespace may hold (0: no
// cap): a create beyond it returns objects.ErrQuotaExceeded, as the real backends' quotas do.
func (s *Store[S, St]) SetMaxPerNamespace(n int, kind string) {
	s.mu.Lock()
	s.max, s.kind = n, kind
	s.mu.Unlock()
}

// New makes an empty store.
func New[S, St any](name func(S) string) *Store[S, St] {
	return &Store[S, St]{m: map[string]map[string]objects.Object[S, St]{}, name: name}
}

var _ objects.Store[objects.FunctionSpec, lifecycle.FunctionStatus] = (*Store[objects.FunctionSpec, lifecycle.FunctionStatus])(nil)

// List returns the namespace's objects sorted by name.
func (s *Store[S, St]) List(_ context.Context, ns string) ([]objects.Object[S, St], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []objects.Object[S, St]{}
	for _, v := range s.m[ns] {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return s.name(out[i].Spec) < s.name(out[j].Spec) })
	return out, nil
}

// Get returns one object or objects.ErrNotFound.
func (s *Store[S, St]) Get(_ context.Context, ns, name string) (objects.Object[S, St], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		return v, fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
	}
	return v, nil
}

// Create adds an object or returns objects.ErrAlreadyExists.
func (s *Store[S, St]) Create(_ context.Context, ns string, spec S) (objects.Object[S, St], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.name(spec)
	if _, ok := s.m[ns][n]; ok {
		return objects.Object[S, St]{}, fmt.Errorf("%s/%s: %w", ns, n, objects.ErrAlreadyExists)
	}
	if s.max > 0 && len(s.m[ns]) >= s.max {
		return objects.Object[S, St]{}, fmt.Errorf("%w: namespace %s holds %d %s, the most its quota allows; delete one first",
			objects.ErrQuotaExceeded, ns, len(s.m[ns]), s.kind)
	}
	if s.m[ns] == nil {
		s.m[ns] = map[string]objects.Object[S, St]{}
	}
	o := objects.Object[S, St]{Spec: spec, Generation: 1}
	s.m[ns][n] = o
	return o, nil
}

// Update applies fn to the spec under the lock; the generation moves when the spec changed.
func (s *Store[S, St]) Update(_ context.Context, ns, name string, fn func(*S) error) (objects.Object[S, St], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		return v, fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
	}
	before := v.Spec
	if err := fn(&v.Spec); err != nil {
		return objects.Object[S, St]{}, err
	}
	if !reflect.DeepEqual(before, v.Spec) {
		v.Generation++
	}
	s.m[ns][name] = v
	return v, nil
}

// SetStatus plays the backend's controller: it applies fn to the status and marks the current
// generation observed.
func (s *Store[S, St]) SetStatus(ns, name string, fn func(*St)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
	}
	fn(&v.Status)
	v.ObservedGeneration = v.Generation
	s.m[ns][name] = v
	return nil
}

// Delete removes one object or returns objects.ErrNotFound.
func (s *Store[S, St]) Delete(_ context.Context, ns, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ns][name]; !ok {
		return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
	}
	delete(s.m[ns], name)
	return nil
}

// DropNamespace removes every object of ns.
func (s *Store[S, St]) DropNamespace(ns string) {
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

var _ objects.Namespaces = (*Namespaces)(nil)

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
func Backend(code codestore.Store, resolver objects.Resolver) (objects.Backend, *Stores) {
	st := &Stores{
		Functions: New[objects.FunctionSpec, lifecycle.FunctionStatus](func(f objects.FunctionSpec) string { return f.Name }),
		Triggers:  New[objects.TriggerSpec, apiv1.TriggerStatus](func(t objects.TriggerSpec) string { return t.Name }),
		Jobs:      New[objects.JobSpec, apiv1.JobStatus](func(j objects.JobSpec) string { return j.Name }),
		Secrets:   &Secrets{},
	}
	st.Namespaces = &Namespaces{onDrop: []func(string){st.Functions.DropNamespace, st.Triggers.DropNamespace, st.Jobs.DropNamespace, st.Secrets.DropNamespace}}
	return objects.Backend{
		Namespaces: st.Namespaces, Functions: st.Functions, Triggers: st.Triggers, Jobs: st.Jobs, Secrets: st.Secrets,
		Invocations: objects.NewInvocationRing(1000), Code: code, Resolver: resolver,
	}, st
}

// Stores gives tests direct access to the state behind a Backend.
type Stores struct {
	Namespaces *Namespaces
	Functions  *Store[objects.FunctionSpec, lifecycle.FunctionStatus]
	Triggers   *Store[objects.TriggerSpec, apiv1.TriggerStatus]
	Jobs       *Store[objects.JobSpec, apiv1.JobStatus]
	Secrets    *Secrets
}
