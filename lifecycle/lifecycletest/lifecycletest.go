package lifecycletest

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
)

// Kind is a kind of transition.
type Kind string

// The transition kinds, one per event of package lifecycle (a failed build in its three outcomes,
// Scaled with and without a limit).
const (
	WaitingForCode  Kind = "WaitingForCode"
	BuildStarted    Kind = "BuildStarted"
	BuildPending    Kind = "BuildPending"
	BuildSucceeded  Kind = "BuildSucceeded"
	BuildFailedUser Kind = "BuildFailed(user)"
	BuildRetrying   Kind = "BuildFailed(platform, retrying)"
	BuildExhausted  Kind = "BuildFailed(platform, budget spent)"
	Starting        Kind = "Starting"
	Ready           Kind = "Ready"
	StartFailed     Kind = "StartFailed"
	Disabled        Kind = "Disabled"
	ScaleLimited    Kind = "Scaled(limited)"
	Scaled          Kind = "Scaled"
	Deleting        Kind = "Deleting"
)

// Kinds are all the kinds.
var Kinds = []Kind{WaitingForCode, BuildStarted, BuildPending, BuildSucceeded, BuildFailedUser, BuildRetrying, BuildExhausted,
	Starting, Ready, StartFailed, Disabled, ScaleLimited, Scaled, Deleting}

// Wrote returns nil when s is what a transition of kind k writes: the event of that kind that s
// describes (its image, message, counts) applied to s changes none of the fields the event sets.
// Times are not compared, nor fields a later transition of another kind may have moved on (a Ready
// function's Built condition is checked under BuildSucceeded, not under Ready).
func Wrote(k Kind, s lifecycle.FunctionStatus) error {
	e, before, fields, err := event(k, s)
	if err != nil {
		return err
	}
	want := lifecycle.Next(before, e, time.Now())
	for _, f := range fields {
		if g, w := f.get(s), f.get(want); !reflect.DeepEqual(g, w) {
			return fmt.Errorf("%s: %s is %#v; lifecycle writes %#v", k, f.name, g, w)
		}
	}
	return nil
}

// WroteWire is Wrote of a status as the API shows it (the controllers' own fields absent).
func WroteWire(k Kind, w apiv1.FunctionStatus) error {
	s := lifecycle.FunctionStatus{FunctionStatus: w}
	if w.ScaleLimited {
		s.Conditions = append(append([]apiv1.Condition(nil), w.Conditions...),
			apiv1.Condition{Type: apiv1.ConditionScaleLimited, Status: "True", Reason: apiv1.ReasonQuotaExceeded, Message: w.Message})
	}
	return Wrote(k, s)
}

// retryOf is a status's retry without its time (times are not compared).
func retryOf(s lifecycle.FunctionStatus) any {
	if s.Retry == nil {
		return nil
	}
	return [2]any{s.Retry.Key, s.Retry.Attempts}
}

type field struct {
	name string
	get  func(lifecycle.FunctionStatus) any
}

func condition(typ string) field {
	return field{typ + " condition", func(s lifecycle.FunctionStatus) any {
		c := apiv1.FindCondition(s.Conditions, typ)
		if c == nil {
			return nil
		}
		return [3]string{c.Status, c.Reason, c.Message}
	}}
}

var (
	phase    = field{"phase", func(s lifecycle.FunctionStatus) any { return s.Phase }}
	message  = field{"message", func(s lifecycle.FunctionStatus) any { return s.Message }}
	image    = field{"image", func(s lifecycle.FunctionStatus) any { return s.Image }}
	replicas = field{"replicas", func(s lifecycle.FunctionStatus) any { return [2]int{s.Replicas, s.DesiredReplicas} }}
	built    = field{"build", func(s lifecycle.FunctionStatus) any {
		return []any{s.Image, s.BuildKey, s.BuiltCodeSHA256, s.Build, s.FailedBuildKey, retryOf(s)}
	}}
	latch         = field{"failed build key", func(s lifecycle.FunctionStatus) any { return s.FailedBuildKey }}
	retry         = field{"retry", func(s lifecycle.FunctionStatus) any { return retryOf(s) }}
	buildingKey   = field{"building key", func(s lifecycle.FunctionStatus) any { return s.BuildingKey }}
	scaleLimited  = field{"scale_limited", func(s lifecycle.FunctionStatus) any { return s.ScaleLimited }}
	builtCond     = condition(apiv1.ConditionBuilt)
	readyCond     = condition(apiv1.ConditionReady)
	scaleLimCond  = condition(apiv1.ConditionScaleLimited)
	retryingMsg   = " (attempt "
	exhaustedMsg  = " (failed "
	waitingPrefix = "starting the first instance of "
)

// event is the event of kind k that s describes, the status it applied to (s, or s before the
// failure counted last) and the fields it sets.
func event(k Kind, s lifecycle.FunctionStatus) (lifecycle.Event, lifecycle.FunctionStatus, []field, error) {
	switch k {
	case WaitingForCode:
		return lifecycle.WaitingForCode{}, s, []field{phase, message, readyCond}, nil
	case BuildStarted:
		c := apiv1.FindCondition(s.Conditions, apiv1.ConditionBuilt)
		if c == nil {
			return nil, s, nil, fmt.Errorf("%s: no Built condition", k)
		}
		if s.BuildingKey == "" {
			return nil, s, nil, fmt.Errorf("%s: no build under way (building key)", k)
		}
		before := s
		before.Phase = "" // as from any other phase
		return lifecycle.BuildStarted{Key: s.BuildingKey, CodeSHA256: strings.TrimPrefix(c.Message, "building the image of code ")}, before,
			[]field{phase, message, buildingKey, builtCond, readyCond}, nil
	case BuildPending:
		c := apiv1.FindCondition(s.Conditions, apiv1.ConditionBuilt)
		return lifecycle.BuildPending{Dependencies: c != nil && c.Reason == apiv1.ReasonInstallingDependencies, Reason: s.Message}, s,
			[]field{phase, message, builtCond, readyCond}, nil
	case BuildSucceeded:
		if s.Image == "" || s.BuildKey == "" || s.BuildingKey != "" {
			return nil, s, nil, fmt.Errorf("%s: image %q, build key %q, building key %q: no build succeeded", k, s.Image, s.BuildKey, s.BuildingKey)
		}
		var info apiv1.BuildInfo
		if s.Build != nil {
			info = *s.Build
		}
		return lifecycle.BuildSucceeded{Key: s.BuildKey, CodeSHA256: s.BuiltCodeSHA256, Image: s.Image, Info: info}, s, []field{built, builtCond}, nil
	case BuildFailedUser:
		if s.FailedBuildKey == "" {
			return nil, s, nil, fmt.Errorf("%s: the failed build is not latched (no failed build key)", k)
		}
		return lifecycle.BuildFailed{Key: s.FailedBuildKey, Message: s.Message, User: true}, s,
			[]field{phase, message, latch, retry, buildingKey, builtCond, readyCond}, nil
	case BuildRetrying, BuildExhausted:
		suffix := retryingMsg
		if k == BuildExhausted {
			suffix = exhaustedMsg
		}
		msg, _, ok := strings.Cut(s.Message, suffix)
		if s.Retry == nil || !ok {
			return nil, s, nil, fmt.Errorf("%s: %q with retry %+v is not a counted platform failure", k, s.Message, s.Retry)
		}
		before := s
		before.Retry = &lifecycle.Retry{Key: s.Retry.Key, Attempts: s.Retry.Attempts - 1}
		return lifecycle.BuildFailed{Key: s.Retry.Key, Message: msg}, before, []field{phase, message, retry, buildingKey, builtCond, readyCond}, nil
	case Starting:
		c := apiv1.FindCondition(s.Conditions, apiv1.ConditionReady)
		if c == nil {
			return nil, s, nil, fmt.Errorf("%s: no Ready condition", k)
		}
		return lifecycle.Starting{Image: strings.TrimPrefix(c.Message, waitingPrefix)}, s, []field{readyCond}, nil
	case Ready:
		return lifecycle.Ready{Image: s.Image, Replicas: s.Replicas, Desired: s.DesiredReplicas}, s, []field{phase, image, message, readyCond}, nil
	case StartFailed:
		return lifecycle.StartFailed{Message: s.Message}, s, []field{phase, message, readyCond}, nil
	case Disabled:
		c := apiv1.FindCondition(s.Conditions, apiv1.ConditionReady)
		var names []string
		if c != nil {
			if list, ok := strings.CutPrefix(c.Message, "stopped: disabled by trigger "); ok {
				names = strings.Split(list, ", ")
			}
		}
		return lifecycle.Disabled{Triggers: names}, s, []field{phase, message, readyCond, scaleLimCond}, nil
	case ScaleLimited, Scaled:
		limited := ""
		if c := apiv1.FindCondition(s.Conditions, apiv1.ConditionScaleLimited); c != nil {
			limited = c.Message
		}
		if (k == ScaleLimited) != (limited != "") {
			return nil, s, nil, fmt.Errorf("%s: the ScaleLimited condition is %q", k, limited)
		}
		return lifecycle.Scaled{Replicas: s.Replicas, Desired: s.DesiredReplicas, Limited: limited}, s,
			[]field{replicas, message, scaleLimited, scaleLimCond}, nil
	case Deleting:
		return lifecycle.Deleting{}, s, []field{replicas, readyCond, scaleLimCond}, nil
	}
	return nil, s, nil, fmt.Errorf("unknown transition kind %q", k)
}
