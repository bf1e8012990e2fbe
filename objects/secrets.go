package objects

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

// SecretMeta is what a store tells of a secret: never its values.
type SecretMeta struct {
	Name string
	// Keys sorted.
	Keys []string
	// Version counts the secret's writes: 1 for the first.
	Version   int64
	UpdatedAt time.Time
}

// Has reports whether the secret has key.
func (m SecretMeta) Has(key string) bool {
	_, ok := slices.BinarySearch(m.Keys, key)
	return ok
}

// SecretView is the wire form of m.
func SecretView(m SecretMeta) apiv1.Secret {
	s := apiv1.Secret{Name: m.Name, Keys: m.Keys, Version: m.Version}
	if s.Keys == nil {
		s.Keys = []string{}
	}
	if !m.UpdatedAt.IsZero() {
		t := m.UpdatedAt.UTC()
		s.UpdatedAt = &t
	}
	return s
}

// Secrets keeps each namespace's secrets. Values go in and never come out through it: what a
// backend's controller needs of them it reads by its own means (the single host's state, the
// kubelet on Kubernetes).
type Secrets interface {
	List(ctx context.Context, ns string) ([]SecretMeta, error)
	// Get returns ErrNotFound for a missing secret.
	Get(ctx context.Context, ns, name string) (SecretMeta, error)
	// Put replaces the secret's data whole (data is checked: apiv1.ValidSecretData) and moves its
	// version on; created is true for a new one. A new secret beyond apiv1.MaxSecrets in ns
	// returns ErrQuotaExceeded (wrapped).
	Put(ctx context.Context, ns, name string, data map[string]string) (m SecretMeta, created bool, err error)
	// Delete returns ErrNotFound for a missing secret.
	Delete(ctx context.Context, ns, name string) error
}

// Secrets is how spec uses the namespace's secrets.
func (s FunctionSpec) Secrets() runspec.SecretRefs {
	return runspec.SecretRefs{Env: s.SecretEnv, Files: s.SecretFiles}
}

// RefersTo reports whether spec uses secret name.
func (s FunctionSpec) RefersTo(name string) bool {
	return slices.Contains(s.Secrets().Names(), name)
}

// TooManySecrets is the error of a Put of a new secret in a namespace that holds apiv1.MaxSecrets.
func TooManySecrets(ns string) error {
	return fmt.Errorf("%w: namespace %s holds %d secrets, the most allowed; delete one first", ErrQuotaExceeded, ns, apiv1.MaxSecrets)
}
