package api

import (
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
)

// egress is a namespace's egress answer: the rule in force (its owner's choice within what the
// install permits now, or all the install permits), the install's, and a note where the backend
// enforces something else.
func (s *Server) egress(r *http.Request, ns string) (apiv1.Egress, error) {
	choice, err := s.b.Egress.Choice(r.Context(), ns)
	if err != nil {
		return apiv1.Egress{}, err
	}
	install := s.b.Egress.Install()
	mode, allow := install.Effective(ns, choice)
	out := apiv1.Egress{EgressRule: apiv1.EgressRule{Mode: mode, Allow: []string{}}, Install: install.Permitted(ns)}
	for _, a := range allow {
		out.Allow = append(out.Allow, a.String())
	}
	if mode == apiv1.EgressInternet {
		out.Note = s.b.Egress.Note()
	}
	return out, nil
}

func (s *Server) egressReady(w http.ResponseWriter, r *http.Request) (string, bool) {
	ns := pathVar(r, "ns")
	if s.b.Egress == nil {
		writeError(w, r, apiv1.Errorf(apiv1.CodeNotReady, "this platform keeps no egress rules"))
		return "", false
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return "", false
	}
	return ns, true
}

func (s *Server) getEgress(w http.ResponseWriter, r *http.Request) {
	ns, ok := s.egressReady(w, r)
	if !ok {
		return
	}
	out, err := s.egress(r, ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// putEgress stores the namespace's rule: a narrowing of what the install permits it (mode "none",
// a subset of the allowed destinations), never a widening (400 naming the entry).
func (s *Server) putEgress(w http.ResponseWriter, r *http.Request) {
	ns, ok := s.egressReady(w, r)
	if !ok {
		return
	}
	// GET's whole answer may come back: install and note are the platform's and ignored.
	var body apiv1.Egress
	if err := decode(w, r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	want := body.EgressRule
	if err := apiv1.NarrowerEgress(s.b.Egress.Install().Permitted(ns), want); err != nil {
		writeError(w, r, err)
		return
	}
	mode, allow, _ := apiv1.ParseEgressRule(want)
	rule := apiv1.EgressRule{Mode: mode, Allow: []string{}}
	for _, a := range allow {
		rule.Allow = append(rule.Allow, a.String())
	}
	if err := s.b.Egress.SetChoice(r.Context(), ns, rule); err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.egress(r, ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
