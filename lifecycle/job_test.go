package lifecycle_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
)

// The run_id rule, for the controllers (NextRun), the API's view of a job its controller has not
// seen yet (JobView), and a PUT (NewRunID).
func TestRunIDRule(t *testing.T) {
	ran := apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 3}
	for _, tc := range []struct {
		runID int64
		s     apiv1.JobStatus
		want  lifecycle.JobAction
		view  apiv1.JobStatus
	}{
		{0, apiv1.JobStatus{}, lifecycle.JobSkip, apiv1.JobStatus{Phase: apiv1.JobSkipped}},
		{0, ran, lifecycle.JobSkip, apiv1.JobStatus{Phase: apiv1.JobSkipped, LastRunID: 3}},
		{1, apiv1.JobStatus{}, lifecycle.JobRun, apiv1.JobStatus{Phase: apiv1.JobPending}},
		{4, ran, lifecycle.JobRun, apiv1.JobStatus{Phase: apiv1.JobPending, LastRunID: 3}},
		{3, ran, lifecycle.JobNothing, ran},
		{2, ran, lifecycle.JobNothing, ran},
	} {
		if got := lifecycle.NextRun(tc.runID, tc.s); got != tc.want {
			t.Errorf("NextRun(%d, %+v) = %v, want %v", tc.runID, tc.s, got, tc.want)
		}
		if d := cmp.Diff(tc.view, lifecycle.JobView(tc.runID, tc.s, false)); d != "" {
			t.Errorf("JobView(%d, %+v) before the controller saw it (-want +got):\n%s", tc.runID, tc.s, d)
		}
		if d := cmp.Diff(tc.s, lifecycle.JobView(tc.runID, tc.s, true)); d != "" {
			t.Errorf("JobView once seen changed the status:\n%s", d)
		}
	}
	for _, tc := range []struct {
		cur, next int64
		run, err  bool
	}{{1, 2, true, false}, {2, 2, false, false}, {2, 1, false, true}, {0, 0, false, false}, {0, 5, true, false}} {
		run, err := lifecycle.NewRunID(tc.cur, tc.next)
		if run != tc.run || (err != nil) != tc.err {
			t.Errorf("NewRunID(%d, %d) = %v, %v", tc.cur, tc.next, run, err)
		}
	}
}

// Every transition of a job's status.
func TestJobTransitions(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	running := apiv1.JobStatus{Phase: apiv1.JobRunning, LastRunID: 2, StartTime: &t0}
	for _, tc := range []struct {
		name  string
		from  apiv1.JobStatus
		event lifecycle.JobEvent
		want  apiv1.JobStatus
	}{
		{"run_id 0", apiv1.JobStatus{LastRunID: 1, Phase: apiv1.JobSucceeded}, lifecycle.RunSkipped{}, apiv1.JobStatus{Phase: apiv1.JobSkipped, LastRunID: 1}},
		{"waiting for the function's build", apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 1, Message: "42", StartTime: &t0, CompletionTime: &t0},
			lifecycle.RunWaiting{Message: "waiting for function \"f\" to be built"},
			apiv1.JobStatus{Phase: apiv1.JobPending, LastRunID: 1, Message: "waiting for function \"f\" to be built"}},
		{"started", apiv1.JobStatus{Phase: apiv1.JobPending, LastRunID: 1, Message: "waiting"}, lifecycle.RunStarted{RunID: 2},
			apiv1.JobStatus{Phase: apiv1.JobRunning, LastRunID: 2, StartTime: &t1}},
		{"succeeded", running, lifecycle.RunFinished{RunID: 2, OK: true, Message: "42"},
			apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 2, Message: "42", StartTime: &t0, CompletionTime: &t1}},
		{"failed", running, lifecycle.RunFinished{RunID: 2, Message: "boom"},
			apiv1.JobStatus{Phase: apiv1.JobFailed, LastRunID: 2, Message: "boom", StartTime: &t0, CompletionTime: &t1}},
		{"an older run's end after a newer run started", running, lifecycle.RunFinished{RunID: 1, OK: true, Message: "old"}, running},
		{"an end recorded already", apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 2, Message: "42", StartTime: &t0, CompletionTime: &t0},
			lifecycle.RunFinished{RunID: 2, Message: "again"}, apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 2, Message: "42", StartTime: &t0, CompletionTime: &t0}},
		{"refused for good (beyond the quota)", apiv1.JobStatus{Phase: apiv1.JobSucceeded, LastRunID: 1}, lifecycle.RunRefused{RunID: 2, Message: "needs 9 GiB"},
			apiv1.JobStatus{Phase: apiv1.JobFailed, LastRunID: 2, Message: "needs 9 GiB", StartTime: &t1, CompletionTime: &t1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, lifecycle.NextJob(tc.from, tc.event, t1.Add(300*time.Millisecond))); d != "" {
				t.Errorf("NextJob (-want +got):\n%s", d)
			}
		})
	}
}

func TestTriggerActive(t *testing.T) {
	no := false
	for _, tc := range []struct {
		t     apiv1.Trigger
		built bool
		want  bool
	}{
		{apiv1.Trigger{Type: apiv1.TriggerHTTP}, false, true},
		{apiv1.Trigger{Type: apiv1.TriggerHTTP, Enabled: &no}, true, false},
		{apiv1.Trigger{Type: apiv1.TriggerCron}, false, false},
		{apiv1.Trigger{Type: apiv1.TriggerCron}, true, true},
		{apiv1.Trigger{Type: apiv1.TriggerCron, Enabled: &no}, true, false},
	} {
		if got := lifecycle.TriggerActive(tc.t, tc.built); got != tc.want {
			t.Errorf("TriggerActive(%+v, %v) = %v", tc.t, tc.built, got)
		}
	}
}
