package api

import (
	"encoding/json"
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

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
	out, err := s.b.Triggers.Update(r.Context(), ns, name, func(t *objects.TriggerSpec) error {
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
	writeJSON(w, http.StatusOK, objects.TriggerView(s.o.publicURL, ns, out))
}
