package api

import (
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

// The wire form of stored objects. Status is the controller's; what the API adds is derived, never
// stored: the URLs (from the API's own base URL), the code being asked for, and Pending while the
// controller has not acted on the current spec (Generation > ObservedGeneration).

// Messages of a function the controller has not caught up with.
const (
	msgWaitingForCode = "waiting for code: upload a zip"
	msgChangePending  = "waiting for the platform to build and roll out this change"
)

func (s *Server) functionView(ns string, o Function) apiv1.Function {
	sp := o.Spec.WithScaleDefaults()
	f := apiv1.Function{Name: sp.Name, Runtime: sp.Runtime, Entrypoint: sp.Entrypoint, MemoryMB: sp.MemoryMB, TimeoutSec: sp.TimeoutSec,
		EnvVars: sp.EnvVars, Status: o.Status, MinReplicas: sp.MinReplicas, MaxReplicas: sp.MaxReplicas, Concurrency: sp.Concurrency,
		IdleTimeoutSec: sp.IdleTimeoutSec}
	f.Status.CodeSHA256 = sp.CodeSHA256
	f.Status.URL = s.FunctionURL(ns, sp.Name)
	if o.Generation > o.ObservedGeneration {
		f.Status.Phase, f.Status.Message = apiv1.PhasePending, msgChangePending
		if sp.CodeSHA256 == "" {
			f.Status.Message = msgWaitingForCode
		}
	}
	return f
}

func (s *Server) triggerView(ns string, o Trigger) apiv1.Trigger {
	sp := o.Spec
	t := apiv1.Trigger{Name: sp.Name, Type: sp.Type, FunctionRef: sp.FunctionRef, Schedule: sp.Schedule, Enabled: sp.Enabled, Status: o.Status}
	if t.Enabled == nil {
		yes := true
		t.Enabled = &yes
	}
	t.Status.URL = ""
	if sp.Type == apiv1.TriggerHTTP {
		t.Status.URL = s.FunctionURL(ns, sp.FunctionRef)
	}
	if o.Generation > o.ObservedGeneration {
		t.Status.Active = t.IsEnabled()
	}
	return t
}

func jobView(o Job) apiv1.Job {
	sp := o.Spec
	j := apiv1.Job{Name: sp.Name, FunctionRef: sp.FunctionRef, EventJSON: sp.EventJSON, RunID: sp.RunID, Status: o.Status}
	if o.Generation > o.ObservedGeneration {
		switch {
		case sp.RunID == 0:
			j.Status.Phase = apiv1.JobSkipped
		case sp.RunID > o.Status.LastRunID:
			j.Status = apiv1.JobStatus{Phase: apiv1.JobPending, LastRunID: o.Status.LastRunID}
		}
	}
	return j
}

// WireTriggers is the wire form of stored triggers' specs, for rules that take it
// (runspec.DisabledBy).
func WireTriggers(ts []Trigger) []apiv1.Trigger {
	out := make([]apiv1.Trigger, len(ts))
	for i, t := range ts {
		sp := t.Spec
		out[i] = apiv1.Trigger{Name: sp.Name, Type: sp.Type, FunctionRef: sp.FunctionRef, Schedule: sp.Schedule, Enabled: sp.Enabled}
	}
	return out
}

// FunctionURL is the public /fn/ URL of a function.
func (s *Server) FunctionURL(ns, name string) string {
	return runspec.FunctionURL(s.o.publicURL, ns, name)
}
