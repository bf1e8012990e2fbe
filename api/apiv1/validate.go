package apiv1

import (
	"regexp"
	"slices"
	"strings"
)

// Limits and defaults of a function's spec. They are the one source of these rules: the server
// enforces them, the CRD markers restate them (a test in operator/api/v1alpha1 checks they agree)
// and clients such as the Terraform provider may check them before sending anything.
const (
	MinMemoryMB, MaxMemoryMB, DefaultMemoryMB       = 64, 8192, 128
	MinTimeoutSec, MaxTimeoutSec, DefaultTimeoutSec = 1, 900, 30
	// Scale (issue 16): instances from MinReplicas to MaxReplicas, Concurrency requests each at
	// most, an instance above MinReplicas stopped after IdleTimeoutSec without a request. The
	// default MaxReplicas is max(DefaultMaxReplicas, min_replicas).
	MaxReplicasLimit                                         = 100
	DefaultMinReplicas, DefaultMaxReplicas                   = 0, 10
	MinConcurrency, MaxConcurrency, DefaultConcurrency       = 1, 1000, 10
	MinIdleTimeoutSec, MaxIdleTimeoutSec, DefaultIdleTimeout = 5, 86400, 300
	// DefaultEntrypoint is the handler when none is given, in every runtime.
	DefaultEntrypoint = "handler.handle"
	// MaxNameLength bounds every name: a DNS-1123 label, as Kubernetes requires.
	MaxNameLength       = 63
	MaxEntrypointLength = 256
	MaxEnvVars          = 128
	// MaxEnvBytes bounds the sum of env var names and values.
	MaxEnvBytes       = 64 << 10
	MaxEventJSONBytes = 64 << 10
)

// Patterns (RE2, also valid OpenAPI patterns) of names, entrypoints and env var names.
const (
	NamePattern       = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	EntrypointPattern = `^[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z_$][A-Za-z0-9_$]*$`
	EnvNamePattern    = `^[A-Za-z_][A-Za-z0-9_]*$`
)

// Runtimes a function may name (their lifecycle: runtimes.go).
const (
	RuntimePython311 = "python3.11"
	RuntimePython313 = "python3.13"
	RuntimeNodejs20  = "nodejs20"
	RuntimeNodejs22  = "nodejs22"
	RuntimeNodejs24  = "nodejs24"
	// RuntimeProvided runs the upload's own executable `bootstrap` on a minimal Debian.
	RuntimeProvided = "provided"
	// ProvidedBootstrap is the executable a provided function's upload holds at its root; an
	// upload without it (or with it not executable) is 400 invalid_archive.
	ProvidedBootstrap = "bootstrap"
)

var (
	nameRE       = regexp.MustCompile(NamePattern)
	entrypointRE = regexp.MustCompile(EntrypointPattern)
	envNameRE    = regexp.MustCompile(EnvNamePattern)
)

// Runtimes lists every runtime a function may name (supported, deprecated or blocked), sorted.
func Runtimes() []string {
	out := make([]string, 0, len(runtimeTable))
	for _, r := range runtimeTable {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func invalid(format string, args ...any) *Error { return Errorf(CodeInvalidArgument, format, args...) }

// ValidName checks a name of kind ("function", "trigger", …): a DNS-1123 label of at most 63
// characters. The error is an invalid_argument *Error saying how to fix it.
func ValidName(kind, name string) error {
	if len(name) > MaxNameLength || !nameRE.MatchString(name) {
		return invalid("%s name %q is invalid: use at most %d lower-case letters, digits and '-', starting and ending with a letter or digit", kind, name, MaxNameLength)
	}
	return nil
}

// ValidEntrypoint checks a handler: module.function (python) or file.export (node).
func ValidEntrypoint(e string) error {
	if len(e) > MaxEntrypointLength || !entrypointRE.MatchString(e) {
		return invalid("entrypoint %q must look like module.function (python) or file.export (node)", e)
	}
	return nil
}

// ValidRuntime checks that r is a supported runtime.
func ValidRuntime(r string) error {
	if !slices.Contains(Runtimes(), r) {
		return invalid("runtime %q is not supported; choose one of %s", r, strings.Join(Runtimes(), ", "))
	}
	return nil
}

// ValidEnvName checks an env var name (letters, digits and '_', not starting with a digit).
func ValidEnvName(k string) error {
	if !envNameRE.MatchString(k) {
		return invalid("env_vars name %q is invalid: use letters, digits and '_', not starting with a digit", k)
	}
	return nil
}

// ValidScale checks the scale fields one by one (0 means the default and is valid for all but
// min_replicas, whose default is 0); that max_replicas is at least min_replicas is the server's
// check, with the defaults applied.
func ValidScale(minReplicas, maxReplicas, concurrency, idleTimeoutSec int) error {
	switch {
	case minReplicas < 0 || minReplicas > MaxReplicasLimit:
		return invalid("min_replicas %d is outside 0–%d", minReplicas, MaxReplicasLimit)
	case maxReplicas != 0 && (maxReplicas < 1 || maxReplicas > MaxReplicasLimit):
		return invalid("max_replicas %d is outside 1–%d", maxReplicas, MaxReplicasLimit)
	case concurrency != 0 && (concurrency < MinConcurrency || concurrency > MaxConcurrency):
		return invalid("concurrency %d is outside %d–%d", concurrency, MinConcurrency, MaxConcurrency)
	case idleTimeoutSec != 0 && (idleTimeoutSec < MinIdleTimeoutSec || idleTimeoutSec > MaxIdleTimeoutSec):
		return invalid("idle_timeout_sec %d is outside %d–%d", idleTimeoutSec, MinIdleTimeoutSec, MaxIdleTimeoutSec)
	}
	return nil
}

// ValidMemoryMB and ValidTimeoutSec check the ranges above (0 means the default and is valid).
func ValidMemoryMB(n int) error {
	if n != 0 && (n < MinMemoryMB || n > MaxMemoryMB) {
		return invalid("memory_mb %d is outside %d–%d", n, MinMemoryMB, MaxMemoryMB)
	}
	return nil
}

func ValidTimeoutSec(n int) error {
	if n != 0 && (n < MinTimeoutSec || n > MaxTimeoutSec) {
		return invalid("timeout_sec %d is outside %d–%d", n, MinTimeoutSec, MaxTimeoutSec)
	}
	return nil
}
