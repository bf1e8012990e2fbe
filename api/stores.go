package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/sless-dev/sless/api/apiv1"
)

// Errors the stores return (wrapped is fine); the API maps them to its error codes.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrConflict      = errors.New("conflict")
)

// NotReadyError says a function cannot take requests now, and why.
type NotReadyError struct{ Reason string }

func (e *NotReadyError) Error() string { return "not ready: " + e.Reason }

// Store keeps one kind of object (functions, triggers, jobs) per namespace.
type Store[T any] interface {
	List(ctx context.Context, ns string) ([]T, error)
	// Get returns ErrNotFound for a missing object.
	Get(ctx context.Context, ns, name string) (T, error)
	// Create returns ErrAlreadyExists when the name is taken.
	Create(ctx context.Context, ns string, obj T) (T, error)
	// Update applies fn to the stored object atomically; an error from fn aborts and is returned.
	Update(ctx context.Context, ns, name string, fn func(*T) error) (T, error)
	// Delete returns ErrNotFound for a missing object.
	Delete(ctx context.Context, ns, name string) error
}

// Namespaces creates and removes tenants' namespaces.
type Namespaces interface {
	Ensure(ctx context.Context, ns string) error
	Exists(ctx context.Context, ns string) (bool, error)
	// Delete removes the namespace and everything left in it.
	Delete(ctx context.Context, ns string) error
}

// CodeStore keeps uploaded archives under keys made by CodeKey.
type CodeStore interface {
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get returns ErrNotFound for a missing key.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Exists(ctx context.Context, key string) (bool, error)
	DeletePrefix(ctx context.Context, prefix string) error
}

// CodeKey is where a function's archive is stored: code/{ns}/{name}/{sha256}.zip.
func CodeKey(ns, name, sha256 string) string {
	return fmt.Sprintf("code/%s/%s/%s.zip", ns, name, sha256)
}

// CodePrefix holds every archive of one function.
func CodePrefix(ns, name string) string { return fmt.Sprintf("code/%s/%s/", ns, name) }

// Resolver finds where a Ready function listens. It returns ErrNotFound or *NotReadyError when it
// cannot route there.
type Resolver interface {
	Resolve(ctx context.Context, ns, name string) (*url.URL, error)
}

// Invocations records calls through /fn/ and lists them newest first.
type Invocations interface {
	Record(ctx context.Context, ns, name string, inv apiv1.Invocation)
	List(ctx context.Context, ns, name string, limit int) ([]apiv1.Invocation, error)
}

// Backend is everything the API needs from a platform.
type Backend struct {
	Namespaces  Namespaces
	Functions   Store[apiv1.Function]
	Triggers    Store[apiv1.Trigger]
	Jobs        Store[apiv1.Job]
	Invocations Invocations
	Code        CodeStore
	Resolver    Resolver
	// Serving, when set, is what /fn/ reads functions and triggers from on every request: a view
	// that may lag the stores above by a moment but costs no round trip (the Kubernetes backend's
	// informer cache). Nil: /fn/ reads the stores above.
	Serving *ServingView
}

// ServingView is the read side /fn/ needs per request.
type ServingView struct {
	Functions interface {
		Get(ctx context.Context, ns, name string) (apiv1.Function, error)
	}
	Triggers interface {
		List(ctx context.Context, ns string) ([]apiv1.Trigger, error)
	}
}

func (b Backend) validate() error {
	switch {
	case b.Namespaces == nil, b.Functions == nil, b.Triggers == nil, b.Jobs == nil:
		return errors.New("api: Backend needs Namespaces, Functions, Triggers and Jobs stores")
	case b.Invocations == nil, b.Code == nil, b.Resolver == nil:
		return errors.New("api: Backend needs Invocations, Code and Resolver")
	}
	return nil
}
