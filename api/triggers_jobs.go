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
	ns := pathVar(r, "ns")
	objs, err := s.b.Triggers.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]apiv1.Trigger, 0, len(objs))
	for _, o := range objs {
		items = append(items, s.triggerView(ns, o))
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Trigger]{Items: items})
}

func (s *Server) createTrigger(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	var t apiv1.Trigger
	if err := decode(w, r, &t); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := ValidateTrigger(t)
	if err != nil {
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
	out, err := s.b.Triggers.Create(r.Context(), ns, spec)
	if errors.Is(err, ErrAlreadyExists) {
		err = apiv1.Errorf(apiv1.CodeAlreadyExists, "trigger %q already exists", t.Name)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.triggerView(ns, out))
}

func (s *Server) getTrigger(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("trigger", name); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.b.Triggers.Get(r.Context(), ns, name)
	if err != nil {
		writeError(w, r, notFound("trigger", name, err))
		return
	}
	writeJSON(w, http.StatusOK, s.triggerView(ns, t))
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
	out, err := s.b.Triggers.Update(r.Context(), ns, name, func(t *TriggerSpec) error {
		for field, cur := range map[string]string{"type": string(t.Type), "function_ref": t.FunctionRef, "schedule": t.Schedule} {
			if v, ok := raw[field]; ok {
				var s string
				if json.Unmarshal(v, &s) != nil || s != cur {
					return invalid("%s is fixed once a trigger exists; delete and re-create the trigger to change it", field)
				}
			}
		}
		t.Enabled = patch.Enabled
		return nil
	})
	if err != nil {
		writeError(w, r, notFound("trigger", name, err))
		return
	}
	writeJSON(w, http.StatusOK, s.triggerView(ns, out))
}

func (s *Server) deleteTrigger(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := apiv1.ValidName("trigger", name); err != nil {
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
	objs, err := s.b.Jobs.List(r.Context(), pathVar(r, "ns"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]apiv1.Job, 0, len(objs))
	for _, o := range objs {
		items = append(items, jobView(o))
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Job]{Items: items})
}

func (s *Server) createJob(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	var j apiv1.Job
	if err := decode(w, r, &j); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := ValidateJob(j)
	if err != nil {
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
	out, err := s.b.Jobs.Create(r.Context(), ns, spec)
	if errors.Is(err, ErrAlreadyExists) {
		err = apiv1.Errorf(apiv1.CodeAlreadyExists, "job %q already exists", j.Name)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, jobView(out))
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := apiv1.ValidName("job", name); err != nil {
		writeError(w, r, err)
		return
	}
	j, err := s.b.Jobs.Get(r.Context(), pathVar(r, "ns"), name)
	if err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	writeJSON(w, http.StatusOK, jobView(j))
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
	spec, err := ValidateJob(j)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.b.Jobs.Update(r.Context(), ns, name, func(cur *JobSpec) error {
		if spec.FunctionRef != cur.FunctionRef {
			return invalid("function_ref is fixed once a job exists; delete and re-create the job to change it")
		}
		switch {
		case spec.RunID < cur.RunID:
			return invalid("run_id %d is lower than the current %d; raise it to run the job again", spec.RunID, cur.RunID)
		case spec.RunID == cur.RunID:
			return nil
		}
		cur.RunID, cur.EventJSON = spec.RunID, spec.EventJSON
		return nil
	})
	if err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	writeJSON(w, http.StatusOK, jobView(out))
}

func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := apiv1.ValidName("job", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.b.Jobs.Delete(r.Context(), pathVar(r, "ns"), name); err != nil {
		writeError(w, r, notFound("job", name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
