package objects

import (
	"context"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// Logs reads what a function's instances print. The API merges the instances and follows new
// ones; a backend reads one instance at a time.
type Logs interface {
	// LogInstances lists the function's instances whose output can be read: those running or
	// starting, and those stopped within fnlog.KeepStopped (Stopped set).
	LogInstances(ctx context.Context, ns, name string) ([]LogInstance, error)
	// ReadLog emits an instance's lines oldest first: those at or after q.Since, of them the last
	// q.Tail (q.Tail < 0: all). With q.Follow it then emits new lines as they come, until the
	// instance stops or ctx ends. An error from emit ends it with that error.
	ReadLog(ctx context.Context, ns, name string, inst LogInstance, q LogQuery, emit func(apiv1.LogLine) error) error
}

// LogInstance is one instance as Logs lists it.
type LogInstance struct {
	// ID names it to ReadLog; unique among the function's instances, past ones included.
	ID string
	// Stopped: it no longer runs; its log is what was kept.
	Stopped bool
}

// LogQuery selects an instance's lines.
type LogQuery struct {
	Since  time.Time
	Tail   int
	Follow bool
}
