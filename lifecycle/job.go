package lifecycle

import (
	"fmt"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// The run_id rule of jobs (the seed's): 0 never runs, a run_id above status.last_run_id starts a
// run, an equal one changes nothing, and a lower one is refused.

// JobAction is what the run_id rule asks of a job's controller.
type JobAction int

const (
	// JobNothing: this run_id ran, or runs: nothing to start.
	JobNothing JobAction = iota
	// JobSkip: run_id 0 never runs.
	JobSkip
	// JobRun: run_id is above the last run: start it.
	JobRun
)

// NextRun is what a job's controller does for spec run_id runID and status s.
func NextRun(runID int64, s apiv1.JobStatus) JobAction {
	switch {
	case runID == 0:
		return JobSkip
	case runID > s.LastRunID:
		return JobRun
	}
	return JobNothing
}

// NewRunID is the API's rule for a job's run_id going from cur to next: a lower one is refused,
// an equal one changes nothing (run is false), a higher one asks for a run.
func NewRunID(cur, next int64) (run bool, err error) {
	if next < cur {
		return false, fmt.Errorf("run_id %d is lower than the current %d; raise it to run the job again", next, cur)
	}
	return next > cur, nil
}

// JobView is a job's status as users see it while its controller has not acted on run_id yet
// (observed false): Skipped for 0, Pending for a new run; else s.
func JobView(runID int64, s apiv1.JobStatus, observed bool) apiv1.JobStatus {
	if observed {
		return s
	}
	switch NextRun(runID, s) {
	case JobSkip:
		s.Phase = apiv1.JobSkipped
	case JobRun:
		s = apiv1.JobStatus{Phase: apiv1.JobPending, LastRunID: s.LastRunID}
	}
	return s
}

// JobEvent is something that happened to a job's run: NextJob applies it to a status.
type JobEvent interface {
	applyJob(s *apiv1.JobStatus, now time.Time)
}

// NextJob is status s after event e happened at now.
func NextJob(s apiv1.JobStatus, e JobEvent, now time.Time) apiv1.JobStatus {
	if s.StartTime != nil {
		t := *s.StartTime
		s.StartTime = &t
	}
	if s.CompletionTime != nil {
		t := *s.CompletionTime
		s.CompletionTime = &t
	}
	e.applyJob(&s, second(now.UTC()))
	return s
}

// Job events.
type (
	// RunSkipped: run_id is 0.
	RunSkipped struct{}
	// RunWaiting: the next run cannot start yet; Message says what it waits for (the function's
	// build, the namespace's quota).
	RunWaiting struct{ Message string }
	// RunStarted: run RunID started.
	RunStarted struct{ RunID int64 }
	// RunFinished: run RunID ended, successfully when OK; Message is its result.
	RunFinished struct {
		RunID   int64
		OK      bool
		Message string
	}
	// RunRefused: run RunID can never start as asked (it needs more than the namespace's quota):
	// it is over, failed, and a higher run_id tries again.
	RunRefused struct {
		RunID   int64
		Message string
	}
)

func (RunSkipped) applyJob(s *apiv1.JobStatus, _ time.Time) { s.Phase = apiv1.JobSkipped }

func (e RunWaiting) applyJob(s *apiv1.JobStatus, _ time.Time) {
	*s = apiv1.JobStatus{Phase: apiv1.JobPending, Message: e.Message, LastRunID: s.LastRunID}
}

func (e RunStarted) applyJob(s *apiv1.JobStatus, now time.Time) {
	*s = apiv1.JobStatus{Phase: apiv1.JobRunning, LastRunID: e.RunID, StartTime: &now}
}

func (e RunFinished) applyJob(s *apiv1.JobStatus, now time.Time) {
	if s.LastRunID != e.RunID || s.Phase != apiv1.JobRunning {
		return // a newer run took over, or this one's end was recorded already
	}
	s.Phase, s.Message, s.CompletionTime = apiv1.JobFailed, e.Message, &now
	if e.OK {
		s.Phase = apiv1.JobSucceeded
	}
}

func (e RunRefused) applyJob(s *apiv1.JobStatus, now time.Time) {
	*s = apiv1.JobStatus{Phase: apiv1.JobFailed, Message: e.Message, LastRunID: e.RunID, StartTime: &now, CompletionTime: &now}
}

// TriggerActive is a trigger's status.active: enabled and, for a cron trigger, its function has
// an image to run.
func TriggerActive(t apiv1.Trigger, functionBuilt bool) bool {
	return t.IsEnabled() && (t.Type != apiv1.TriggerCron || functionBuilt)
}
