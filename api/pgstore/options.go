package pgstore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Option configures Open.
type Option func(*options) error

type options struct {
	bufferSize        int
	batchSize         int
	flushInterval     time.Duration
	retention         time.Duration
	retentionInterval time.Duration
	queryTimeout      time.Duration
	closeTimeout      time.Duration
	maxBackoff        time.Duration
	logger            *slog.Logger
}

func makeOptions(opts []Option) (*options, error) {
	o := &options{
		bufferSize:        10_000,
		batchSize:         1_000,
		flushInterval:     200 * time.Millisecond,
		retention:         7 * 24 * time.Hour,
		retentionInterval: 5 * time.Minute,
		queryTimeout:      2 * time.Second,
		closeTimeout:      5 * time.Second,
		maxBackoff:        5 * time.Second,
		logger:            slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.batchSize > o.bufferSize {
		o.batchSize = o.bufferSize
	}
	return o, nil
}

// WithBufferSize bounds the records waiting to be written; a record that finds the buffer full is
// dropped and counted (sless_invocations_dropped_total). The default is 10,000.
func WithBufferSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("pgstore.WithBufferSize(%d): the buffer needs room for at least one record", n)
		}
		o.bufferSize = n
		return nil
	}
}

// WithFlushInterval is how often waiting records are written; a full batch (1,000 records) is
// written at once. The default is 200 ms.
func WithFlushInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("pgstore.WithFlushInterval(%v): must be positive", d)
		}
		o.flushInterval = d
		return nil
	}
}

// WithRetention is how long records are kept; older ones are deleted in batches every
// WithRetentionInterval. Zero keeps them forever. The default is 7 days.
func WithRetention(age time.Duration) Option {
	return func(o *options) error {
		if age < 0 {
			return fmt.Errorf("pgstore.WithRetention(%v): must not be negative (0 keeps records forever)", age)
		}
		o.retention = age
		return nil
	}
}

// WithRetentionInterval is how often records older than WithRetention are deleted (the first
// time as soon as the database is reachable). The default is 5 minutes.
func WithRetentionInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("pgstore.WithRetentionInterval(%v): must be positive", d)
		}
		o.retentionInterval = d
		return nil
	}
}

// WithQueryTimeout bounds a List (and the delete a Forget tries at once), and each call of the
// asynchronous queue (each batch of its Forget and Purge). The default is 2 s.
func WithQueryTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("pgstore.WithQueryTimeout(%v): must be positive", d)
		}
		o.queryTimeout = d
		return nil
	}
}

// WithCloseTimeout bounds how long Close tries to write what is still buffered; what it cannot
// write is counted dropped. The default is 5 s.
func WithCloseTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("pgstore.WithCloseTimeout(%v): must not be negative", d)
		}
		o.closeTimeout = d
		return nil
	}
}

// WithMaxBackoff caps the wait between attempts to connect, migrate or write while PostgreSQL
// is away (attempts start 100 ms apart and double). The default is 5 s.
func WithMaxBackoff(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("pgstore.WithMaxBackoff(%v): must be at least 100ms", d)
		}
		o.maxBackoff = d
		return nil
	}
}

// WithLogger receives what the store does in the background: connecting, migrations applied,
// writes failing and recovering, rows deleted by retention. The default discards it.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("pgstore.WithLogger(nil): pass a logger, or no option to discard")
		}
		o.logger = l
		return nil
	}
}
