package autoscale

import (
	"errors"
	"fmt"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// The ranges and defaults of a function's scale settings: apiv1's, the one source of these rules
// (the server, the CRD markers and the provider state them from there).
const (
	MinReplicasMin     = 0
	MinReplicasMax     = apiv1.MaxReplicasLimit
	DefaultMinReplicas = apiv1.DefaultMinReplicas

	MaxReplicasMin = 1
	MaxReplicasMax = apiv1.MaxReplicasLimit
	// DefaultMaxReplicas is the default max_replicas, or min_replicas when that is larger.
	DefaultMaxReplicas = apiv1.DefaultMaxReplicas

	ConcurrencyMin = apiv1.MinConcurrency
	ConcurrencyMax = apiv1.MaxConcurrency
	// DefaultConcurrency is the default hard limit of requests in flight per instance.
	DefaultConcurrency = apiv1.DefaultConcurrency

	IdleTimeoutMin     = apiv1.MinIdleTimeoutSec * time.Second
	IdleTimeoutMax     = apiv1.MaxIdleTimeoutSec * time.Second
	DefaultIdleTimeout = apiv1.DefaultIdleTimeout * time.Second
)

// Spec is a function's scale settings. A zero field takes its default (see WithDefaults).
type Spec struct {
	// MinReplicas is how many instances run even without traffic; 0 lets the function go to zero.
	MinReplicas int
	// MaxReplicas caps the instances, ready and starting together.
	MaxReplicas int
	// Concurrency is the hard limit of requests in flight per instance; the proxy enforces it, the
	// decider only divides by it.
	Concurrency int
	// IdleTimeout is how long an instance above MinReplicas may have nothing in flight or held on
	// it before it is stopped.
	IdleTimeout time.Duration
}

// WithDefaults returns s with each zero field set to its default; MaxReplicas defaults to
// max(DefaultMaxReplicas, MinReplicas) so that min_replicas alone is a valid setting.
func (s Spec) WithDefaults() Spec {
	if s.MinReplicas == 0 {
		s.MinReplicas = DefaultMinReplicas
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = max(DefaultMaxReplicas, s.MinReplicas)
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	return s
}

// Validate reports every setting of s.WithDefaults() that is out of range, naming the wire fields,
// so that the API can reject a spec with one message.
func (s Spec) Validate() error {
	s = s.WithDefaults()
	var errs []error
	if s.MinReplicas < MinReplicasMin || s.MinReplicas > MinReplicasMax {
		errs = append(errs, fmt.Errorf("min_replicas %d is not in %d–%d", s.MinReplicas, MinReplicasMin, MinReplicasMax))
	}
	if s.MaxReplicas < MaxReplicasMin || s.MaxReplicas > MaxReplicasMax {
		errs = append(errs, fmt.Errorf("max_replicas %d is not in %d–%d", s.MaxReplicas, MaxReplicasMin, MaxReplicasMax))
	}
	if s.MaxReplicas < s.MinReplicas {
		errs = append(errs, fmt.Errorf("max_replicas %d is below min_replicas %d", s.MaxReplicas, s.MinReplicas))
	}
	if s.Concurrency < ConcurrencyMin || s.Concurrency > ConcurrencyMax {
		errs = append(errs, fmt.Errorf("concurrency %d is not in %d–%d", s.Concurrency, ConcurrencyMin, ConcurrencyMax))
	}
	if s.IdleTimeout < IdleTimeoutMin || s.IdleTimeout > IdleTimeoutMax || s.IdleTimeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("idle_timeout_sec %v is not a whole number of seconds in %d–%d",
			s.IdleTimeout.Seconds(), int(IdleTimeoutMin/time.Second), int(IdleTimeoutMax/time.Second)))
	}
	return errors.Join(errs...)
}

// normalized is the spec Decide works with: defaults applied and every value forced into its
// range, so a spec that skipped Validate cannot divide by zero or ask for a negative count.
func (s Spec) normalized() Spec {
	s = s.WithDefaults()
	s.MinReplicas = min(max(s.MinReplicas, MinReplicasMin), MinReplicasMax)
	s.MaxReplicas = min(max(s.MaxReplicas, MaxReplicasMin, s.MinReplicas), MaxReplicasMax)
	s.Concurrency = min(max(s.Concurrency, ConcurrencyMin), ConcurrencyMax)
	s.IdleTimeout = min(max(s.IdleTimeout, IdleTimeoutMin), IdleTimeoutMax)
	return s
}
