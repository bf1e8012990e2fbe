package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
)

// maxJSONBody bounds JSON request bodies (specs are small; env vars at most 64 KiB).
const maxJSONBody = 1 << 20

// pathVar returns a path variable, unescaped (the router matches on the escaped path so that "%2F"
// cannot smuggle a slash into a name).
func pathVar(r *http.Request, key string) string {
	v := mux.Vars(r)[key]
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return invalid("the request needs a JSON body")
		}
		return invalid("the body is not valid JSON for this route: %v", err)
	}
	return nil
}

func (s *Server) nsExists(r *http.Request, ns string) error {
	ok, err := s.b.Namespaces.Exists(r.Context(), ns)
	if err != nil {
		return err
	}
	if !ok {
		return apiv1.Errorf(apiv1.CodeNotFound, "namespace %q does not exist; call POST /v1/namespaces/%s/ensure first", ns, ns)
	}
	return nil
}

func notFound(kind, name string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return apiv1.Errorf(apiv1.CodeNotFound, "%s %q not found", kind, name)
	}
	return err
}

// --- namespaces

func (s *Server) ensureNamespace(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	if err := s.b.Namespaces.Ensure(r.Context(), ns); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.Namespace{Name: ns})
}

func (s *Server) deleteNamespace(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	fns, err := s.b.Functions.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if len(fns) > 0 {
		writeError(w, r, apiv1.Errorf(apiv1.CodeConflict, "namespace %q still has %d function(s); delete them first", ns, len(fns)))
		return
	}
	if err := s.b.Namespaces.Delete(r.Context(), ns); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// --- functions

func (s *Server) listFunctions(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	objs, err := s.b.Functions.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]apiv1.Function, 0, len(objs))
	for _, o := range objs {
		items = append(items, s.functionView(ns, o))
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Function]{Items: items})
}

func (s *Server) createFunction(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	var f apiv1.Function
	if err := decode(w, r, &f); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := ValidateFunction(f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.nsExists(r, ns); err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.b.Functions.Create(r.Context(), ns, spec)
	if errors.Is(err, ErrAlreadyExists) {
		err = apiv1.Errorf(apiv1.CodeAlreadyExists, "function %q already exists", f.Name)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	// A function re-created under an earlier one's name starts with no history: the earlier one's
	// build log and events (written behind its lifecycle, possibly after its deletion) and its
	// instances' kept logs go. Best effort: they are the author's view, not the platform's state.
	fnlog.Forget(context.WithoutCancel(r.Context()), s.b.Code, ns, f.Name)
	writeJSON(w, http.StatusCreated, s.functionView(ns, out))
}

func (s *Server) getFunction(w http.ResponseWriter, r *http.Request) {
	name := pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return
	}
	ns := pathVar(r, "ns")
	f, err := s.b.Functions.Get(r.Context(), ns, name)
	if err != nil {
		writeError(w, r, notFound("function", name, err))
		return
	}
	writeJSON(w, http.StatusOK, s.functionView(ns, f))
}

func (s *Server) updateFunction(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	var f apiv1.Function
	if err := decode(w, r, &f); err != nil {
		writeError(w, r, err)
		return
	}
	if f.Name == "" {
		f.Name = name
	}
	if f.Name != name {
		writeError(w, r, invalid("the body names function %q but the path %q; a function cannot be renamed", f.Name, name))
		return
	}
	spec, err := ValidateFunction(f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.b.Functions.Update(r.Context(), ns, name, func(cur *FunctionSpec) error {
		// The code is the upload's to change; the store moves the generation if anything else did,
		// and the function shows Pending until the backend has rolled the change out.
		spec.CodeSHA256 = cur.CodeSHA256
		*cur = spec
		return nil
	})
	if err != nil {
		writeError(w, r, notFound("function", name, err))
		return
	}
	writeJSON(w, http.StatusOK, s.functionView(ns, out))
}

func (s *Server) deleteFunction(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.b.Functions.Delete(r.Context(), ns, name); err != nil {
		writeError(w, r, notFound("function", name, err))
		return
	}
	// The function is gone; its archives go too (a backend may also remove them, harmlessly).
	if err := s.b.Code.DeletePrefix(r.Context(), codestore.Prefix(ns, name)); err != nil {
		writeError(w, r, fmt.Errorf("deleting stored code of %s/%s: %w", ns, name, err))
		return
	}
	if err := s.b.Invocations.Forget(r.Context(), ns, name); err != nil {
		writeError(w, r, fmt.Errorf("deleting the invocation records of %s/%s: %w", ns, name, err))
		return
	}
	s.forget(ns, name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) invocations(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	if err := apiv1.ValidName("function", name); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := s.b.Functions.Get(r.Context(), ns, name); err != nil {
		writeError(w, r, notFound("function", name, err))
		return
	}
	q := InvocationQuery{Limit: DefaultInvocationLimit}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxInvocationLimit {
			writeError(w, r, invalid("limit %q must be between 1 and %d", v, MaxInvocationLimit))
			return
		}
		q.Limit = n
	}
	if v := r.URL.Query().Get("before"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, r, invalid("before %q is not an RFC 3339 time such as 2006-01-02T15:04:05.999999Z (URL-encode a + offset as %%2B)", v))
			return
		}
		q.Before = t
	}
	items, err := s.b.Invocations.List(r.Context(), ns, name, q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.List[apiv1.Invocation]{Items: nonNil(items)})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
