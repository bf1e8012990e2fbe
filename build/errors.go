package build

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
)

var (
	// ErrCodeMissing: the archive a function names is not in the code store.
	ErrCodeMissing = errors.New("code missing")
	// ErrCodeMismatch: the stored archive does not hash to the name it is stored under.
	ErrCodeMismatch = errors.New("code does not match its sha256")
	// ErrNoDeps: the code declares dependencies and the platform has no way to install them.
	ErrNoDeps = errors.New("this platform has no dependency installs configured")
)

// PendingError says a build cannot run or finish now: its dependency layer is being made
// elsewhere (a Kubernetes Job), or no build slot is free. It is neither a success nor a failure:
// build again later.
type PendingError struct {
	// Reason says what is awaited ("installing dependencies: Job app-deps-1a2b…").
	Reason string
	// RetryAfter is when to look again; events (the Job finishing) may come sooner.
	RetryAfter time.Duration
	// Dependencies is set when the dependency layer is what is awaited.
	Dependencies bool
}

func (e *PendingError) Error() string { return "build pending: " + e.Reason }

// IsPending reports whether err is (or wraps) a *PendingError.
func IsPending(err error) bool {
	_, ok := errors.AsType[*PendingError](err)
	return ok
}

// Reasons name why a build failed, as Kubernetes condition reasons and status messages use them.
const (
	ReasonBuildFailed        = "BuildFailed"
	ReasonDependenciesFailed = "DependenciesFailed"
)

// IsUserError reports whether a build failed because of the function itself (its code, its
// manifests, its settings) rather than the platform (registry, disk, network): the same inputs fail
// the same way again, so backends do not retry them until the build key changes.
func IsUserError(err error) bool {
	if _, ok := errors.AsType[*layers.EntryError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*deps.InstallError](err); ok {
		return true
	}
	for _, target := range []error{oci.ErrInvalidSource, deps.ErrInvalidSpec, layers.ErrInvalidArchive, layers.ErrTooLarge,
		layers.ErrCompressionRatio, layers.ErrNotExecutable, ErrCodeMissing, ErrCodeMismatch} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Reason is ReasonDependenciesFailed when the dependencies are at fault, else ReasonBuildFailed.
func Reason(err error) string {
	if _, ok := errors.AsType[*deps.InstallError](err); ok || errors.Is(err, deps.ErrInvalidSpec) {
		return ReasonDependenciesFailed
	}
	return ReasonBuildFailed
}

// Message is what a function's status says about a failed build.
func Message(err error) string {
	if Reason(err) == ReasonDependenciesFailed {
		return err.Error()
	}
	return fmt.Sprintf("build failed: %v", err)
}

// IsTransient reports whether a platform error passes by itself: the registry or the code store
// did not answer, answered 5xx or throttled. A caller that retries such a build shows it as still
// building; other platform errors (a refused credential, a replaced cache layer, no dependency
// installs configured) are failures, though retried too.
func IsTransient(err error) bool {
	if errors.Is(err, codestore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if te, ok := errors.AsType[*transport.Error](err); ok {
		return te.StatusCode >= 500 || te.StatusCode == http.StatusTooManyRequests
	}
	_, isNet := errors.AsType[net.Error](err)
	return isNet
}
