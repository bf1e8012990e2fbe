package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
)

// functionExists makes a reference to a missing function a user error at creation time.
func (s *Server) functionExists(r *http.Request, ns, name string) error {
	if _, err := s.b.Functions.Get(r.Context(), ns, name); err != nil {
		if errors.Is(err, ErrNotFound) {
			return invalid("function_ref %q: no such function in this namespace; create it first", name)
		}
		return err
	}
	return nil
}

// --- triggers

func (s *Server) listTriggers(w http.ResponseWriter, r *http.Request) {
	items, err := s.b.Triggers.List(r.Context(), pathVar(r, "ns"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Trigger]{Items: nonNil(items)})
}

func (s *Server) createTrigger(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	var t apiv1.Trigger
	if err := decode(w, r, &t); err != nil {
		writeError(w, r, err)
		return
	}
	if err := ValidateTrigger(&t); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.functionExists(r, ns, t.FunctionRef); err != nil {
		writeError(w, r, err)
		return
	}
	t.Status = apiv1.TriggerStatus{Active: t.IsEnabled()}
	if t.Type == apiv1.TriggerHTTP {
		t.Status.URL = s.FunctionURL(ns, t.FunctionRef)
	}
	out, err := s.b.Triggers.Create(r.Context(), ns, t)
	if errors.Is(err, ErrAlreadyExists) {
		err = apiv1.Errorf(apiv1.CodeAlreadyExists, "trigger %q already exists", t.Name)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) getTrigger(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := ValidName("trigger", name); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.b.Triggers.Get(r.Context(), pathVar(r, "ns"), name)
	if err != nil {
		writeError(w, r, notFound("trigger", name, err))
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// patchTrigger changes only enabled; an attempt to change what is fixed is refused, so that a
// client that expects it to happen learns it did not.
func (s *Server) patchTrigger(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	var raw map[string]json.RawMessage
	if err := decode(w, r, &raw); err != nil {
		writeError(w, r, err)
		return
	}
	var patch apiv1.TriggerPatch
	if v, ok := raw["enabled"]; ok {
		if err := json.Unmarshal(v, &patch.Enabled); err != nil || patch.Enabled == nil {
			writeError(w, r, invalid("enabled must be true or false"))
			return
		}
	} else {
		writeError(w, r, invalid(`the body must set "enabled"; it is the only field a trigger can change`))
		return
	}
	out, err := s.b.Triggers.Update(r.Context(), ns, name, func(t *apiv1.Trigger) error {
		for field, cur := range map[string]string{"type": t.Type, "function_ref": t.FunctionRef, "schedule": t.Schedule} {
			if v, ok := raw[field]; ok {
				var s string
				if json.Unmarshal(v, &s) != nil || s != cur {
					return invalid("%s is fixed once a trigger exists; delete and re-create the trigger to change it", field)
				}
			}
		}
		t.Enabled = patch.Enabled
		t.Status.Active = *patch.Enabled
		return nil
	})
	if err != nil {
		writeError(w, r, notFound("trigger", name, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteTrigger(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := ValidName("trigger", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.b.Triggers.Delete(r.Context(), pathVar(r, "ns"), name); err != nil {
		writeError(w, r, notFound("trigger", name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// --- jobs

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	items, err := s.b.Jobs.List(r.Context(), pathVar(r, "ns"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Job]{Items: nonNil(items)})
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	var j apiv1.Job
	if err := decode(w, r, &j); err != nil {
		writeError(w, r, err)
		return
	}
	if err := ValidateJob(&j); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.functionExists(r, ns, j.FunctionRef); err != nil {
		writeError(w, r, err)
		return
	}
	j.Status = apiv1.JobStatus{Phase: apiv1.JobPending}
	if j.RunID == 0 {
		j.Status.Phase = apiv1.JobSkipped
	}
	out, err := s.b.Jobs.Create(r.Context(), ns, j)
	if errors.Is(err, ErrAlreadyExists) {
		err = apiv1.Errorf(apiv1.CodeAlreadyExists, "job %q already exists", j.Name)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := ValidName("job", name); err != nil {
		writeError(w, r, err)
		return
	}
	j, err := s.b.Jobs.Get(r.Context(), pathVar(r, "ns"), name)
	if err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// putJob follows the seed's run_id rule: higher runs again, equal changes nothing, lower is refused.
func (s *Server) putJob(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	var j apiv1.Job
	if err := decode(w, r, &j); err != nil {
		writeError(w, r, err)
		return
	}
	if j.Name == "" {
		j.Name = name
	}
	if j.Name != name {
		writeError(w, r, invalid("the body names job %q but the path %q", j.Name, name))
		return
	}
	if err := ValidateJob(&j); err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.b.Jobs.Update(r.Context(), ns, name, func(cur *apiv1.Job) error {
		if j.FunctionRef != cur.FunctionRef {
			return invalid("function_ref is fixed once a job exists; delete and re-create the job to change it")
		}
		switch {
		case j.RunID < cur.RunID:
			return invalid("run_id %d is lower than the current %d; raise it to run the job again", j.RunID, cur.RunID)
		case j.RunID == cur.RunID:
			return nil
		}
		cur.RunID, cur.EventJSON = j.RunID, j.EventJSON
		cur.Status.Phase, cur.Status.Message = apiv1.JobPending, ""
		cur.Status.StartTime, cur.Status.CompletionTime = nil, nil
		return nil
	})
	if err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := ValidName("job", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.b.Jobs.Delete(r.Context(), pathVar(r, "ns"), name); err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
