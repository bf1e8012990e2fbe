package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
)

var (
	t0  = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	t1  = t0.Add(time.Minute)
	img = "reg/ns/f@sha256:" + strings.Repeat("b", 64)
)

func cond(typ, status, reason, msg string, at time.Time) apiv1.Condition {
	return apiv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: at}
}

func st(phase apiv1.Phase, msg string, conds ...apiv1.Condition) lifecycle.FunctionStatus {
	var s lifecycle.FunctionStatus
	s.Phase, s.Message, s.Conditions = phase, msg, conds
	return s
}

// with returns s changed by f (for the cases' statuses that differ from a base in a field or two).
func with(s lifecycle.FunctionStatus, f func(*lifecycle.FunctionStatus)) lifecycle.FunctionStatus {
	f(&s)
	return s
}

// ready is a function serving img since t0.
var ready = with(st(apiv1.PhaseReady, "", cond("Built", "True", "Built", img, t0), cond("Ready", "True", "Ready", "serving "+img, t0)),
	func(s *lifecycle.FunctionStatus) {
		s.Image, s.BuildKey, s.BuiltCodeSHA256, s.Replicas, s.DesiredReplicas = img, "k1", "c0de", 1, 1
	})

// building is a build of key k2 started at t0 while nothing serves.
var building = with(st(apiv1.PhaseBuilding, "", cond("Built", "False", "Building", "building the image of code c0de2", t0),
	cond("Ready", "False", "Building", "waiting for the image", t0)), func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k2" })

// retrying is building after n platform failures of k2.
func retrying(n int) lifecycle.FunctionStatus {
	msg := fmt.Sprintf("build failed: 503 (attempt %d of %d; retrying in %s)", n, lifecycle.RetryBudget, lifecycle.RetryDelay(n))
	return with(st(apiv1.PhaseBuilding, msg, cond("Built", "False", "Building", msg, t0), cond("Ready", "False", "Building", "waiting for the image", t0)),
		func(s *lifecycle.FunctionStatus) {
			s.BuildingKey, s.Retry = "k2", &lifecycle.Retry{Key: "k2", Attempts: n, NotBefore: t1.Add(lifecycle.RetryDelay(n))}
		})
}

// exhausted is a build of k2 the platform failed RetryBudget times in a row.
var exhausted = func() lifecycle.FunctionStatus {
	n := lifecycle.RetryBudget
	msg := fmt.Sprintf("build failed: 503 (failed %d times in a row; retrying every %s)", n, lifecycle.RetryDelay(n))
	return with(st(apiv1.PhaseFailed, msg, cond("Built", "False", "Failed", msg, t0), cond("Ready", "False", "Failed", msg, t0)),
		func(s *lifecycle.FunctionStatus) {
			s.BuildingKey, s.Retry = "k2", &lifecycle.Retry{Key: "k2", Attempts: n, NotBefore: t1.Add(lifecycle.RetryDelay(n))}
		})
}()

// Every transition of a function's status, each from the states it happens in.
var cases = []struct {
	name     string
	from     lifecycle.FunctionStatus
	event    lifecycle.Event
	want     lifecycle.FunctionStatus
	kind     lifecycletest.Kind // the transition kind the backends' tests check (lifecycletest.Check)
	pureOnly bool               // a state the backends' tests cannot observe by itself
}{
	{name: "a new function waits for code", event: lifecycle.WaitingForCode{}, kind: lifecycletest.WaitingForCode,
		want: st(apiv1.PhasePending, lifecycle.MsgWaitingForCode, cond("Ready", "False", "Pending", lifecycle.MsgWaitingForCode, t1))},
	{name: "the first build starts", from: st(apiv1.PhasePending, lifecycle.MsgWaitingForCode, cond("Ready", "False", "Pending", lifecycle.MsgWaitingForCode, t0)),
		event: lifecycle.BuildStarted{Key: "k2", CodeSHA256: "c0de2"}, kind: lifecycletest.BuildStarted,
		want: with(st(apiv1.PhaseBuilding, "", cond("Ready", "False", "Building", "waiting for the image", t0), cond("Built", "False", "Building", "building the image of code c0de2", t1)),
			func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k2" })},
	{name: "a new build of a serving function starts (the old version serves on)", from: ready,
		event: lifecycle.BuildStarted{Key: "k2", CodeSHA256: "c0de2"}, kind: lifecycletest.BuildStarted,
		want: with(ready, func(s *lifecycle.FunctionStatus) {
			s.Phase, s.BuildingKey = apiv1.PhaseBuilding, "k2"
			s.Conditions = []apiv1.Condition{cond("Built", "False", "Building", "building the image of code c0de2", t1), cond("Ready", "False", "Building", "waiting for the image", t1)}
		})},
	{name: "a build that waits or is retried says so on: starting again changes nothing", from: retrying(2),
		event: lifecycle.BuildStarted{Key: "k2", CodeSHA256: "c0de2"}, want: retrying(2), pureOnly: true},
	{name: "a retried build of other code starts afresh", from: retrying(2),
		event: lifecycle.BuildStarted{Key: "k3", CodeSHA256: "c0de3"}, kind: lifecycletest.BuildStarted,
		want: with(st(apiv1.PhaseBuilding, "", cond("Built", "False", "Building", "building the image of code c0de3", t0), cond("Ready", "False", "Building", "waiting for the image", t0)),
			func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k3" })},
	{name: "new code while the last version starts: its build starts afresh", from: with(st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting,
		cond("Built", "True", "Built", img, t0), cond("Ready", "False", "Starting", "starting", t0)), func(s *lifecycle.FunctionStatus) { s.Image, s.BuildKey = img, "k2" }),
		event: lifecycle.BuildStarted{Key: "k3", CodeSHA256: "c0de3"}, kind: lifecycletest.BuildStarted,
		want: with(st(apiv1.PhaseBuilding, "", cond("Built", "False", "Building", "building the image of code c0de3", t1), cond("Ready", "False", "Building", "waiting for the image", t0)),
			func(s *lifecycle.FunctionStatus) { s.Image, s.BuildKey, s.BuildingKey = img, "k2", "k3" })},
	{name: "a build waits for a dependency install", from: building,
		event: lifecycle.BuildPending{Dependencies: true, Reason: "installing dependencies: Job f-deps-1"}, kind: lifecycletest.BuildPending,
		want: with(st(apiv1.PhaseBuilding, "installing dependencies: Job f-deps-1", cond("Built", "False", "InstallingDependencies", "installing dependencies: Job f-deps-1", t0),
			cond("Ready", "False", "Building", "waiting for the image", t0)), func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k2" })},
	{name: "a build waits for a build slot", from: building,
		event: lifecycle.BuildPending{Reason: "waiting for a build slot"}, kind: lifecycletest.BuildPending,
		want: with(st(apiv1.PhaseBuilding, "waiting for a build slot", cond("Built", "False", "Building", "waiting for a build slot", t0), cond("Ready", "False", "Building", "waiting for the image", t0)),
			func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k2" })},
	{name: "a build succeeds", from: retrying(3),
		event: lifecycle.BuildSucceeded{Key: "k2", CodeSHA256: "c0de2", Image: img, Info: apiv1.BuildInfo{DurationMS: 40, DepsKey: "d", DepsCached: true}}, kind: lifecycletest.BuildSucceeded,
		want: with(st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting, cond("Built", "True", "Built", img, t1), cond("Ready", "False", "Building", "waiting for the image", t0)),
			func(s *lifecycle.FunctionStatus) {
				s.Image, s.BuildKey, s.BuiltCodeSHA256, s.LastBuiltAt = img, "k2", "c0de2", &t1
				s.Build = &apiv1.BuildInfo{DurationMS: 40, DepsKey: "d", DepsCached: true}
			})},
	{name: "the user's code fails its build: Failed, and latched", from: building,
		event: lifecycle.BuildFailed{Key: "k2", Message: "build failed: no handler.py", User: true}, kind: lifecycletest.BuildFailedUser,
		want: with(st(apiv1.PhaseFailed, "build failed: no handler.py", cond("Built", "False", "Failed", "build failed: no handler.py", t0),
			cond("Ready", "False", "Failed", "build failed: no handler.py", t0)), func(s *lifecycle.FunctionStatus) { s.FailedBuildKey = "k2" })},
	{name: "the platform fails a build: Building, retried", from: building,
		event: lifecycle.BuildFailed{Key: "k2", Message: "build failed: 503"}, kind: lifecycletest.BuildRetrying,
		want: retrying(1)},
	{name: "the platform fails a build again: the next attempt waits longer", from: retrying(1),
		event: lifecycle.BuildFailed{Key: "k2", Message: "build failed: 503"}, kind: lifecycletest.BuildRetrying, want: retrying(2)},
	{name: "a platform error that is not transient (a 403 of the registry) is retried within the same budget", from: retrying(4),
		event: lifecycle.BuildFailed{Key: "k2", Message: "build failed: 503"}, kind: lifecycletest.BuildRetrying, want: retrying(5)},
	{name: "the retry budget is spent: Failed", from: retrying(lifecycle.RetryBudget - 1),
		event: lifecycle.BuildFailed{Key: "k2", Message: "build failed: 503"}, kind: lifecycletest.BuildExhausted, want: exhausted},
	{name: "a spent build is still retried, Failed meanwhile", from: exhausted,
		event: lifecycle.BuildStarted{Key: "k2", CodeSHA256: "c0de2"}, want: exhausted, pureOnly: true},
	{name: "a spent build that succeeds at last", from: exhausted,
		event: lifecycle.BuildSucceeded{Key: "k2", CodeSHA256: "c0de2", Image: img}, pureOnly: true,
		want: with(st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting, cond("Built", "True", "Built", img, t1), cond("Ready", "False", "Failed", exhausted.Message, t0)),
			func(s *lifecycle.FunctionStatus) {
				s.Image, s.BuildKey, s.BuiltCodeSHA256, s.LastBuiltAt, s.Build = img, "k2", "c0de2", &t1, &apiv1.BuildInfo{}
			})},
	{name: "the new version's first instance starts", from: with(building, func(s *lifecycle.FunctionStatus) { s.Message = lifecycle.MsgBuiltStarting }),
		event: lifecycle.Starting{Image: img}, kind: lifecycletest.Starting,
		want: with(st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting, cond("Built", "False", "Building", "building the image of code c0de2", t0),
			cond("Ready", "False", "Starting", "starting the first instance of "+img, t0)), func(s *lifecycle.FunctionStatus) { s.BuildingKey = "k2" })},
	{name: "the new version serves", from: st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting, cond("Ready", "False", "Starting", "starting", t0)),
		event: lifecycle.Ready{Image: img, Replicas: 1, Desired: 2}, kind: lifecycletest.Ready,
		want: with(st(apiv1.PhaseReady, "", cond("Ready", "True", "Ready", "serving "+img, t1)),
			func(s *lifecycle.FunctionStatus) { s.Image, s.Replicas, s.DesiredReplicas = img, 1, 2 })},
	{name: "the new version does not start", from: st(apiv1.PhaseBuilding, lifecycle.MsgBuiltStarting, cond("Ready", "False", "Starting", "starting", t0)),
		event: lifecycle.StartFailed{Message: "exited with 1"}, kind: lifecycletest.StartFailed,
		want: st(apiv1.PhaseFailed, "exited with 1", cond("Ready", "False", "Failed", "start failed: exited with 1", t0))},
	{name: "its http triggers switch it off", from: with(ready, func(s *lifecycle.FunctionStatus) {
		s.Conditions = append(s.Conditions, cond("ScaleLimited", "True", "QuotaExceeded", "q", t0))
		s.ScaleLimited, s.Message = true, "q"
	}),
		event: lifecycle.Disabled{Triggers: []string{"web", "www"}}, kind: lifecycletest.Disabled,
		want: with(ready, func(s *lifecycle.FunctionStatus) {
			s.Replicas, s.DesiredReplicas, s.Message = 0, 0, "stopped: disabled by trigger web, www"
			s.Conditions = []apiv1.Condition{cond("Built", "True", "Built", img, t0), cond("Ready", "True", "Disabled", "stopped: disabled by trigger web, www", t0)}
		})},
	{name: "the tenant's quota stops a scale-up", from: ready, event: lifecycle.Scaled{Replicas: 1, Desired: 3, Limited: "quota q"}, kind: lifecycletest.ScaleLimited,
		want: with(ready, func(s *lifecycle.FunctionStatus) {
			s.DesiredReplicas, s.Message, s.ScaleLimited = 3, "quota q", true
			s.Conditions = append(s.Conditions, cond("ScaleLimited", "True", "QuotaExceeded", "quota q", t1))
		})},
	{name: "the quota lets it scale again", from: with(ready, func(s *lifecycle.FunctionStatus) {
		s.Message, s.ScaleLimited = "quota q", true
		s.Conditions = append(s.Conditions, cond("ScaleLimited", "True", "QuotaExceeded", "quota q", t0))
	}), event: lifecycle.Scaled{Replicas: 3, Desired: 3}, kind: lifecycletest.Scaled,
		want: with(ready, func(s *lifecycle.FunctionStatus) { s.Replicas, s.DesiredReplicas = 3, 3 })},
	{name: "a function still building scales (its message is the build's)", from: retrying(1), event: lifecycle.Scaled{Replicas: 0, Desired: 1, Limited: "quota q"},
		pureOnly: true, want: with(retrying(1), func(s *lifecycle.FunctionStatus) {
			s.DesiredReplicas, s.ScaleLimited = 1, true
			s.Conditions = append(s.Conditions, cond("ScaleLimited", "True", "QuotaExceeded", "quota q", t1))
		})},
	{name: "it is deleted", from: ready, event: lifecycle.Deleting{}, kind: lifecycletest.Deleting,
		want: with(ready, func(s *lifecycle.FunctionStatus) {
			s.Replicas, s.DesiredReplicas = 0, 0
			s.Conditions = []apiv1.Condition{cond("Built", "True", "Built", img, t0), cond("Ready", "False", "Deleting", "deleted; removing its instances and images", t1)}
		})},
}

// clone is a deep copy of s.
func clone(t *testing.T, s lifecycle.FunctionStatus) lifecycle.FunctionStatus {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var c lifecycle.FunctionStatus
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTransitions(t *testing.T) {
	kinds := map[lifecycletest.Kind]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from := clone(t, tc.from)
			got := lifecycle.Next(tc.from, tc.event, t1)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Next (-want +got):\n%s", d)
			}
			if d := cmp.Diff(from, tc.from); d != "" {
				t.Errorf("Next changed its argument:\n%s", d)
			}
			for _, c := range got.Conditions {
				if !slices.Contains(apiv1.Reasons, c.Reason) {
					t.Errorf("condition %s has reason %q, which is not among the documented apiv1.Reasons", c.Type, c.Reason)
				}
			}
			// What the backends' tests check of a status they wrote holds of what Next wrote.
			if !tc.pureOnly {
				kinds[tc.kind] = true
				if err := lifecycletest.Wrote(tc.kind, got); err != nil {
					t.Errorf("lifecycletest.Wrote(%s): %v", tc.kind, err)
				}
			}
		})
	}
	for _, k := range lifecycletest.Kinds {
		if !kinds[k] {
			t.Errorf("no case of transition kind %s", k)
		}
	}
}

// Wrote fails for a status that no transition of the kind wrote: it is what makes the backends'
// tests fail when a backend writes its own idea of a state.
func TestWroteRefusesOtherStatuses(t *testing.T) {
	for _, tc := range []struct {
		kind lifecycletest.Kind
		s    lifecycle.FunctionStatus
	}{
		{lifecycletest.Ready, with(ready, func(s *lifecycle.FunctionStatus) { s.Conditions[1].Reason = "Serving" })},
		{lifecycletest.BuildRetrying, with(retrying(2), func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseFailed })},
		{lifecycletest.BuildRetrying, with(retrying(2), func(s *lifecycle.FunctionStatus) { s.Message = "build failed: 503 (retrying)" })},
		{lifecycletest.BuildFailedUser, with(ready, func(s *lifecycle.FunctionStatus) { s.Phase, s.Message = apiv1.PhaseFailed, "x" })},
		{lifecycletest.BuildFailedUser, lifecycle.Next(building, lifecycle.BuildFailed{Message: "x", User: true}, t1)}, // not latched
		{lifecycletest.BuildStarted, with(building, func(s *lifecycle.FunctionStatus) { s.BuildingKey = "" })},
		{lifecycletest.BuildSucceeded, with(ready, func(s *lifecycle.FunctionStatus) { s.BuildKey = "" })},
		{lifecycletest.Disabled, with(ready, func(s *lifecycle.FunctionStatus) { s.Message = "stopped: disabled by its http triggers" })},
		{lifecycletest.StartFailed, st(apiv1.PhaseFailed, "x", cond("Ready", "False", "StartFailed", "x", t0))},
		{lifecycletest.WaitingForCode, st(apiv1.PhasePending, "waiting", cond("Ready", "False", "Pending", "waiting", t0))},
	} {
		if err := lifecycletest.Wrote(tc.kind, tc.s); err == nil {
			t.Errorf("%s: %+v passes", tc.kind, tc.s)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := lifecycle.RetryDelay(n); got != w {
			t.Errorf("RetryDelay(%d) = %s, want %s", n, got, w)
		}
	}
	if lifecycle.RetryDelay(100) != lifecycle.RetryMax {
		t.Error("RetryDelay(100)")
	}
}

func TestBuildDue(t *testing.T) {
	latched := with(ready, func(s *lifecycle.FunctionStatus) { s.FailedBuildKey = "k2" })
	for _, tc := range []struct {
		s    lifecycle.FunctionStatus
		key  string
		want bool
	}{
		{lifecycle.FunctionStatus{}, "k1", true},
		{ready, "k1", false},
		{ready, "k2", true},
		{latched, "k2", false},
		{latched, "k3", true},
	} {
		if got := tc.s.BuildDue(tc.key); got != tc.want {
			t.Errorf("BuildDue(%s) of %+v = %v", tc.key, tc.s, got)
		}
	}
}

// The wire form hides what the controllers keep for themselves and shows ScaleLimited as a field.
func TestWire(t *testing.T) {
	s := lifecycle.Next(ready, lifecycle.Scaled{Replicas: 1, Desired: 3, Limited: "quota q"}, t1)
	s.FailedBuildKey, s.Retry = "k9", &lifecycle.Retry{Key: "k9", Attempts: 1}
	w := s.Wire()
	if !w.ScaleLimited || apiv1.FindCondition(w.Conditions, "ScaleLimited") != nil || len(w.Conditions) != 2 {
		t.Errorf("wire: %+v", w)
	}
}
