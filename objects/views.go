package objects

import (
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/runspec"
)

// The wire form of stored objects. Status is the controller's; what the API adds is derived, never
// stored: the URLs (from the API's base URL), the code being asked for, and Pending while the
// controller has not acted on the current spec (Generation > ObservedGeneration).

// MsgChangePending is the message of a function whose controller has not caught up with its spec.
const MsgChangePending = "waiting for the platform to build and roll out this change"

// FunctionView is the wire form of o in namespace ns, with URLs under publicURL.
func FunctionView(publicURL, ns string, o Function) apiv1.Function {
	sp := o.Spec.WithScaleDefaults()
	f := apiv1.Function{Name: sp.Name, Runtime: sp.Runtime, Entrypoint: sp.Entrypoint, MemoryMB: sp.MemoryMB, TimeoutSec: sp.TimeoutSec,
		EnvVars: sp.EnvVars, SecretEnv: sp.SecretEnv, SecretFiles: sp.SecretFiles, Status: o.Status.Wire(), MinReplicas: sp.MinReplicas, MaxReplicas: sp.MaxReplicas, Concurrency: sp.Concurrency,
		IdleTimeoutSec: sp.IdleTimeoutSec, Async: sp.Async}
	f.Status.CodeSHA256 = sp.CodeSHA256
	f.Status.URL = runspec.FunctionURL(publicURL, ns, sp.Name)
	if o.Generation > o.ObservedGeneration {
		f.Status.Phase, f.Status.Message = apiv1.PhasePending, MsgChangePending
		if sp.CodeSHA256 == "" {
			f.Status.Message = lifecycle.MsgWaitingForCode
		}
	}
	return f
}

// TriggerView is the wire form of o in namespace ns, with URLs under publicURL.
func TriggerView(publicURL, ns string, o Trigger) apiv1.Trigger {
	t := WireTrigger(o)
	t.Status = o.Status
	if t.Enabled == nil {
		yes := true
		t.Enabled = &yes
	}
	t.Status.URL = ""
	if t.Type == apiv1.TriggerHTTP {
		t.Status.URL = runspec.FunctionURL(publicURL, ns, t.FunctionRef)
	}
	if o.Generation > o.ObservedGeneration {
		t.Status.Active = t.IsEnabled()
	}
	return t
}

// JobView is the wire form of o.
func JobView(o Job) apiv1.Job {
	sp := o.Spec
	return apiv1.Job{Name: sp.Name, FunctionRef: sp.FunctionRef, EventJSON: sp.EventJSON, RunID: sp.RunID,
		Status: lifecycle.JobView(sp.RunID, o.Status, o.Generation <= o.ObservedGeneration)}
}

// WireTrigger is the wire form of a stored trigger's spec, without a status, for rules that take
// it (runspec.DisabledBy).
func WireTrigger(o Trigger) apiv1.Trigger {
	sp := o.Spec
	return apiv1.Trigger{Name: sp.Name, Type: sp.Type, FunctionRef: sp.FunctionRef, Schedule: sp.Schedule, RabbitMQ: sp.RabbitMQ, Enabled: sp.Enabled}
}

// WireTriggers is WireTrigger of each of ts.
func WireTriggers(ts []Trigger) []apiv1.Trigger {
	out := make([]apiv1.Trigger, len(ts))
	for i, t := range ts {
		out[i] = WireTrigger(t)
	}
	return out
}
