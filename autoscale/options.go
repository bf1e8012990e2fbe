package autoscale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// The decider's defaults (issue 16, the same as Knative's KPA).
const (
	DefaultStableWindow   = 60 * time.Second
	DefaultPanicWindow    = 6 * time.Second
	DefaultPanicThreshold = 2.0
	DefaultTick           = time.Second
	// maxBuckets bounds the memory one function's window may take, whatever the options.
	maxBuckets = 3600
)

// Option configures New.
type Option func(*options) error

type options struct {
	clock                   func() time.Time
	stable, panic, tick     time.Duration
	threshold               float64
	stableTicks, panicTicks int64
}

func makeOptions(opts ...Option) (*options, error) {
	o := &options{
		clock:     time.Now,
		stable:    DefaultStableWindow,
		panic:     DefaultPanicWindow,
		threshold: DefaultPanicThreshold,
		tick:      DefaultTick,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	switch {
	case o.clock == nil:
		return nil, errors.New("autoscale: the clock is nil")
	case o.tick <= 0:
		return nil, fmt.Errorf("autoscale: the tick %v must be positive", o.tick)
	case o.panic < o.tick:
		return nil, fmt.Errorf("autoscale: the panic window %v is shorter than the tick %v", o.panic, o.tick)
	case o.stable < o.panic:
		return nil, fmt.Errorf("autoscale: the stable window %v is shorter than the panic window %v", o.stable, o.panic)
	case o.stable/o.tick > maxBuckets:
		return nil, fmt.Errorf("autoscale: the stable window %v holds more than %d ticks of %v: use a longer tick", o.stable, maxBuckets, o.tick)
	case math.IsNaN(o.threshold) || o.threshold < 1:
		return nil, fmt.Errorf("autoscale: the panic threshold %v must be at least 1 (times capacity)", o.threshold)
	}
	// A window that is not a whole number of ticks is rounded up to one.
	o.stableTicks = int64((o.stable + o.tick - 1) / o.tick)
	o.panicTicks = int64((o.panic + o.tick - 1) / o.tick)
	return o, nil
}

// WithClock sets where the decider reads the time; tests pass a fake clock's Now.
// The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) error { o.clock = now; return nil }
}

// WithStableWindow sets the window whose average load gives the number of instances wanted, and
// how long panic mode outlives the last time its threshold was met. The default is 60 s.
func WithStableWindow(d time.Duration) Option {
	return func(o *options) error { o.stable = d; return nil }
}

// WithPanicWindow sets the short window that takes over when the load surges. It may not be longer
// than the stable window. The default is 6 s.
func WithPanicWindow(d time.Duration) Option {
	return func(o *options) error { o.panic = d; return nil }
}

// WithPanicThreshold sets the multiple of the current capacity (instances × concurrency) at which
// the panic window's average load starts panic mode; at least 1. The default is 2.0.
func WithPanicThreshold(f float64) Option {
	return func(o *options) error { o.threshold = f; return nil }
}

// WithTick sets the width of the buckets the samples are averaged into, and so the resolution of
// both windows; backends call Decide about once a tick and Record at least once a tick. The default
// is 1 s.
func WithTick(d time.Duration) Option {
	return func(o *options) error { o.tick = d; return nil }
}
