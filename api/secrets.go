package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// maxSecretBody bounds PUT …/secrets/{name}: a secret's 1 MiB of values, JSON-escaped.
const maxSecretBody = 8 << 20

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	ms, err := s.b.Secrets.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]apiv1.Secret, 0, len(ms))
	for _, m := range ms {
		items = append(items, objects.SecretView(m))
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Secret]{Items: items})
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("secret", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	m, err := s.b.Secrets.Get(r.Context(), ns, name)
	if err != nil {
		writeError(w, r, notFound("secret", name, err))
		return
	}
	writeJSON(w, http.StatusOK, objects.SecretView(m))
}

// putSecret stores a secret whole: 201 when new, 200 when replaced. The functions that use it
// restart with the new values (their backends see the version move).
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("secret", name); err != nil {
		drain(r)
		writeError(w, r, err)
		return
	}
	var body apiv1.SecretPut
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSecretBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeError(w, r, err)
			return
		}
		// The decoder's message may quote the body: say where, not what.
		writeError(w, r, invalid("the body must be {\"data\": {\"KEY\": \"value\", …}} (JSON, values as strings)"))
		return
	}
	if err := apiv1.ValidSecretData(body.Data); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	m, created, err := s.b.Secrets.Put(r.Context(), ns, name, body.Data)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, objects.SecretView(m))
}

// deleteSecret refuses (409) while a function refers to the secret: its next start would fail.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("secret", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	fns, err := s.b.Functions.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var users []string
	for _, f := range fns {
		if !f.Deleting && f.Spec.RefersTo(name) {
			users = append(users, f.Spec.Name)
		}
	}
	if len(users) > 0 {
		writeError(w, r, apiv1.Errorf(apiv1.CodeConflict, "secret %q is used by function(s) %s; remove it from their secret_env and secret_files first",
			name, strings.Join(users, ", ")))
		return
	}
	if err := s.b.Secrets.Delete(r.Context(), ns, name); err != nil {
		writeError(w, r, notFound("secret", name, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
