package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// Secrets is an objects.Secrets in a map. Values gives tests what a controller would read.
type Secrets struct {
	mu sync.Mutex
	m  map[string]map[string]secret
}

type secret struct {
	meta objects.SecretMeta
	data map[string]string
}

var _ objects.Secrets = (*Secrets)(nil)

// List returns ns's secrets sorted by name.
func (s *Secrets) List(_ context.Context, ns string) ([]objects.SecretMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []objects.SecretMeta{}
	for _, name := range slices.Sorted(maps.Keys(s.m[ns])) {
		out = append(out, s.m[ns][name].meta)
	}
	return out, nil
}

// Get returns one secret's description or objects.ErrNotFound.
func (s *Secrets) Get(_ context.Context, ns, name string) (objects.SecretMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	if !ok {
		return objects.SecretMeta{}, fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
	}
	return v.meta, nil
}

// Put replaces a secret whole.
func (s *Secrets) Put(_ context.Context, ns, name string, data map[string]string) (objects.SecretMeta, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[string]secret{}
	}
	if s.m[ns] == nil {
		s.m[ns] = map[string]secret{}
	}
	old, exists := s.m[ns][name]
	if !exists && len(s.m[ns]) >= apiv1.MaxSecrets {
		return objects.SecretMeta{}, false, objects.TooManySecrets(ns)
	}
	m := objects.SecretMeta{Name: name, Keys: slices.Sorted(maps.Keys(data)), Version: old.meta.Version + 1, UpdatedAt: time.Now()}
	s.m[ns][name] = secret{meta: m, data: maps.Clone(data)}
	return m, !exists, nil
}

// Delete removes a secret or returns objects.ErrNotFound.
func (s *Secrets) Delete(_ context.Context, ns, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[ns][name]; !ok {
		return fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
	}
	delete(s.m[ns], name)
	return nil
}

// Values are a secret's data, as a backend's controller would read them.
func (s *Secrets) Values(ns, name string) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns][name]
	return maps.Clone(v.data), ok
}

// DropNamespace forgets ns's secrets.
func (s *Secrets) DropNamespace(ns string) {
	s.mu.Lock()
	delete(s.m, ns)
	s.mu.Unlock()
}
