package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// FunctionStatus is what a backend's controller writes of a function: the status users see and
// what the controller keeps for its own decisions.
type FunctionStatus struct {
	apiv1.FunctionStatus
	// BuiltCodeSHA256 is the code Image was built from.
	BuiltCodeSHA256 string `json:"built_code_sha256,omitempty"`
	// BuildKey is the key of Image's build (package build): the function is built again when the
	// key of its spec differs.
	BuildKey string `json:"build_key,omitempty"`
	// FailedBuildKey latches a build that failed through the function's own fault: it is not tried
	// again until the key changes (new code, runtime or entrypoint).
	FailedBuildKey string `json:"failed_build_key,omitempty"`
	// BuildingKey is the key of the build under way (started, waiting or retried), "" when none is.
	BuildingKey string `json:"building_key,omitempty"`
	// Retry counts the platform's failures in a row of one build.
	Retry *Retry `json:"retry,omitempty"`
}

// Retry is how often in a row the platform failed the build of Key, and when it may run again.
type Retry struct {
	Key      string `json:"key"`
	Attempts int    `json:"attempts"`
	// NotBefore is when the next attempt is due: a controller woken earlier (by an owned
	// object's change, a resync) waits until then (RetryWait).
	NotBefore time.Time `json:"not_before"`
}

// The retry budget of a build the platform fails (a registry or code store that does not answer,
// answers 5xx, throttles or refuses the platform's credentials), the same on both backends: the
// function stays Building while the build is retried after RetryBase, doubling up to RetryMax; the
// RetryBudget-th failure in a row makes it Failed. It is still retried every RetryMax after that,
// so a platform that comes back makes it Ready without the user doing anything.
const (
	RetryBase   = time.Second
	RetryMax    = 30 * time.Second
	RetryBudget = 6
)

// RetryDelay is the wait after the attempts-th failure in a row (client-go's exponential failure
// rate limiter with RetryBase and RetryMax waits the same).
func RetryDelay(attempts int) time.Duration {
	if attempts < 1 {
		return 0
	}
	if attempts > 16 {
		return RetryMax
	}
	return min(RetryMax, RetryBase<<(attempts-1))
}

// Messages of the states a status is in.
const (
	MsgWaitingForCode = "waiting for code: upload a zip"
	MsgBuiltStarting  = "built; starting"
	msgWaitingImage   = "waiting for the image"
)

// Event is something that happened to a function: Next applies it to a status.
type Event interface {
	apply(s *FunctionStatus, now time.Time)
}

// Next is status s after event e happened at now. It does not change s. Times it writes are
// whole seconds (as Kubernetes keeps them).
func Next(s FunctionStatus, e Event, now time.Time) FunctionStatus {
	s = s.clone()
	e.apply(&s, now.UTC())
	return s
}

// second is t in whole seconds, rounded down; ceilSecond rounded up.
func second(t time.Time) time.Time { return t.Truncate(time.Second) }

func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// Events, in the order a function usually goes through them.
type (
	// WaitingForCode: the function has no code yet.
	WaitingForCode struct{}
	// BuildStarted: a build of Key (from code CodeSHA256) begins or is tried again.
	BuildStarted struct{ Key, CodeSHA256 string }
	// BuildPending: the build waits, for a dependency install (Dependencies) or a free build slot;
	// Reason says what it waits for.
	BuildPending struct {
		Dependencies bool
		Reason       string
	}
	// BuildSucceeded: Image is the build of Key, from code CodeSHA256.
	BuildSucceeded struct {
		Key, CodeSHA256, Image string
		Info                   apiv1.BuildInfo
	}
	// BuildFailed: the build of Key failed; User when the function's own code or dependencies are
	// at fault (it would fail the same way again), else the platform failed it.
	BuildFailed struct {
		Key, Message string
		User         bool
	}
	// Starting: the first instance of a new version (Image) starts.
	Starting struct{ Image string }
	// Ready: Image serves, with Replicas instances ready of Desired.
	Ready struct {
		Image             string
		Replicas, Desired int
	}
	// StartFailed: the new version did not start; Message says why. The previous version, if any,
	// keeps serving, and the start is retried.
	StartFailed struct{ Message string }
	// Disabled: the http triggers named switch the function off; no instance runs.
	Disabled struct{ Triggers []string }
	// Scaled: the instances ready now and those the platform scales to; Limited, when set, says
	// what stops the scale-up (the tenant's quota).
	Scaled struct {
		Replicas, Desired int
		Limited           string
	}
	// Deleting: the function was deleted and the platform removes what is left of it.
	Deleting struct{}
)

func (WaitingForCode) apply(s *FunctionStatus, now time.Time) {
	s.Phase, s.Message = apiv1.PhasePending, MsgWaitingForCode
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonPending, MsgWaitingForCode, now)
}

func (e BuildStarted) apply(s *FunctionStatus, now time.Time) {
	if s.Retry != nil && s.Retry.Key != e.Key {
		s.Retry = nil
	}
	if s.Retry != nil && s.Retry.Attempts >= RetryBudget {
		s.BuildingKey = e.Key
		return // Failed: retried every RetryMax, without going back to Building each time
	}
	if s.Phase == apiv1.PhaseBuilding && s.BuildingKey == e.Key {
		return // the message and conditions say what this build waits for, or why it is retried
	}
	s.Phase, s.Message, s.BuildingKey = apiv1.PhaseBuilding, "", e.Key
	s.set(apiv1.ConditionBuilt, "False", apiv1.ReasonBuilding, "building the image of code "+short(e.CodeSHA256), now)
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonBuilding, msgWaitingImage, now)
}

func (e BuildPending) apply(s *FunctionStatus, now time.Time) {
	reason := apiv1.ReasonBuilding
	if e.Dependencies {
		reason = apiv1.ReasonInstallingDependencies
	}
	s.Phase, s.Message = apiv1.PhaseBuilding, e.Reason
	s.set(apiv1.ConditionBuilt, "False", reason, e.Reason, now)
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonBuilding, msgWaitingImage, now)
}

func (e BuildSucceeded) apply(s *FunctionStatus, now time.Time) {
	info, at := e.Info, second(now)
	s.Image, s.BuiltCodeSHA256, s.BuildKey, s.Build, s.LastBuiltAt = e.Image, e.CodeSHA256, e.Key, &info, &at
	s.FailedBuildKey, s.Retry, s.BuildingKey = "", nil, ""
	s.Phase, s.Message = apiv1.PhaseBuilding, MsgBuiltStarting
	s.set(apiv1.ConditionBuilt, "True", apiv1.ReasonBuilt, e.Image, now)
}

func (e BuildFailed) apply(s *FunctionStatus, now time.Time) {
	msg := strings.TrimSpace(e.Message)
	if e.User {
		s.FailedBuildKey, s.Retry, s.BuildingKey = e.Key, nil, ""
		s.failed(msg, msg, now)
		return
	}
	n := 1
	if s.Retry != nil && s.Retry.Key == e.Key {
		n = s.Retry.Attempts + 1
	}
	s.Retry, s.BuildingKey = &Retry{Key: e.Key, Attempts: n, NotBefore: ceilSecond(now.Add(RetryDelay(n)))}, e.Key
	if n >= RetryBudget {
		m := fmt.Sprintf("%s (failed %d times in a row; retrying every %s)", msg, n, RetryDelay(n))
		s.failed(m, m, now)
		return
	}
	s.Phase, s.Message = apiv1.PhaseBuilding, fmt.Sprintf("%s (attempt %d of %d; retrying in %s)", msg, n, RetryBudget, RetryDelay(n))
	s.set(apiv1.ConditionBuilt, "False", apiv1.ReasonBuilding, s.Message, now)
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonBuilding, msgWaitingImage, now)
}

func (e Starting) apply(s *FunctionStatus, now time.Time) {
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonStarting, "starting the first instance of "+e.Image, now)
}

func (e Ready) apply(s *FunctionStatus, now time.Time) {
	s.Phase, s.Image = apiv1.PhaseReady, e.Image
	s.Replicas, s.DesiredReplicas = e.Replicas, e.Desired
	s.set(apiv1.ConditionReady, "True", apiv1.ReasonReady, "serving "+e.Image, now)
	s.readyMessage()
}

func (e StartFailed) apply(s *FunctionStatus, now time.Time) {
	s.Phase, s.Message = apiv1.PhaseFailed, e.Message
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonFailed, "start failed: "+e.Message, now)
}

func (e Disabled) apply(s *FunctionStatus, now time.Time) {
	msg := "stopped: disabled by trigger " + strings.Join(e.Triggers, ", ")
	s.Phase, s.Replicas, s.DesiredReplicas = apiv1.PhaseReady, 0, 0
	s.set(apiv1.ConditionReady, "True", apiv1.ReasonDisabled, msg, now)
	s.remove(apiv1.ConditionScaleLimited)
	s.readyMessage()
}

func (e Scaled) apply(s *FunctionStatus, now time.Time) {
	s.Replicas, s.DesiredReplicas = e.Replicas, e.Desired
	if e.Limited != "" {
		s.set(apiv1.ConditionScaleLimited, "True", apiv1.ReasonQuotaExceeded, e.Limited, now)
	} else {
		s.remove(apiv1.ConditionScaleLimited)
	}
	if s.Phase == apiv1.PhaseReady {
		s.readyMessage()
	}
}

func (Deleting) apply(s *FunctionStatus, now time.Time) {
	s.Replicas, s.DesiredReplicas = 0, 0
	s.remove(apiv1.ConditionScaleLimited)
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonDeleting, "deleted; removing its instances and images", now)
}

// failed is Phase Failed with message, and both conditions False with cond.
func (s *FunctionStatus) failed(message, cond string, now time.Time) {
	s.Phase, s.Message = apiv1.PhaseFailed, message
	s.set(apiv1.ConditionBuilt, "False", apiv1.ReasonFailed, cond, now)
	s.set(apiv1.ConditionReady, "False", apiv1.ReasonFailed, cond, now)
}

// readyMessage is a Ready function's message, from its conditions: why no instance runs, or what
// stops a scale-up; else none.
func (s *FunctionStatus) readyMessage() {
	s.Message = ""
	if c := apiv1.FindCondition(s.Conditions, apiv1.ConditionReady); c != nil && c.Reason == apiv1.ReasonDisabled {
		s.Message = c.Message
	} else if c := apiv1.FindCondition(s.Conditions, apiv1.ConditionScaleLimited); c != nil && c.Status == "True" {
		s.Message = c.Message
	}
	s.ScaleLimited = s.IsScaleLimited()
}

func (s *FunctionStatus) set(typ, status, reason, msg string, now time.Time) {
	apiv1.SetCondition(&s.Conditions, apiv1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: second(now)})
	s.ScaleLimited = s.IsScaleLimited()
}

func (s *FunctionStatus) remove(typ string) {
	s.Conditions = slices.DeleteFunc(s.Conditions, func(c apiv1.Condition) bool { return c.Type == typ })
	s.ScaleLimited = s.IsScaleLimited()
}

func (s FunctionStatus) clone() FunctionStatus {
	s.Conditions = slices.Clone(s.Conditions)
	if s.Build != nil {
		b := *s.Build
		s.Build = &b
	}
	if s.LastBuiltAt != nil {
		t := *s.LastBuiltAt
		s.LastBuiltAt = &t
	}
	if s.Retry != nil {
		r := *s.Retry
		s.Retry = &r
	}
	return s
}

// BuildDue reports whether the function must be built for key: it has no image, or its image is
// of another key, and the build of key has not failed through the function's own fault.
func (s FunctionStatus) BuildDue(key string) bool {
	return (s.Image == "" || s.BuildKey != key) && s.FailedBuildKey != key
}

// RetryWait is how long the build of key must still wait at now after the platform failed it
// (Retry.NotBefore), 0 when it may run.
func (s FunctionStatus) RetryWait(key string, now time.Time) time.Duration {
	if s.Retry == nil || s.Retry.Key != key {
		return 0
	}
	return max(0, s.Retry.NotBefore.Sub(now))
}

// IsDisabled reports whether the function's http triggers switch it off.
func (s FunctionStatus) IsDisabled() bool {
	c := apiv1.FindCondition(s.Conditions, apiv1.ConditionReady)
	return c != nil && c.Reason == apiv1.ReasonDisabled
}

// IsScaleLimited reports whether the tenant's quota stops a scale-up.
func (s FunctionStatus) IsScaleLimited() bool {
	c := apiv1.FindCondition(s.Conditions, apiv1.ConditionScaleLimited)
	return c != nil && c.Status == "True"
}

// Wire is the status as users see it: Built and Ready among the conditions (ScaleLimited is
// scale_limited).
func (s FunctionStatus) Wire() apiv1.FunctionStatus {
	w := s.clone().FunctionStatus
	w.ScaleLimited = s.IsScaleLimited()
	w.Conditions = slices.DeleteFunc(w.Conditions, func(c apiv1.Condition) bool { return c.Type == apiv1.ConditionScaleLimited })
	return w
}

func short(sha string) string { return sha[:min(12, len(sha))] }
