package api

import (
	"errors"
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// kind is one kind of stored object as the REST API serves it, for the routes every kind shares
// (list, create, get, replace, delete): W is its wire form, S its spec and St its status.
type kind[W, S, St any] struct {
	noun  string // "function", "trigger", "job": in paths' messages
	store objects.Store[S, St]
	// view is the wire form of a stored object of namespace ns.
	view func(ns string, o objects.Object[S, St]) W
	// validate checks a body and returns the spec to store.
	validate func(W) (S, error)
	// nameOf is the name field of a body.
	nameOf func(*W) *string
	// refs, when set, checks what a new object refers to, once its namespace is known to exist.
	refs func(r *http.Request, ns string, spec S) error
	// created and deleted, when set, run after a create and a delete succeeded.
	created func(r *http.Request, ns, name string)
	deleted func(r *http.Request, ns, name string) error
	// replace applies a validated body to the stored spec (PUT); nil: no PUT route.
	replace func(body S, cur *S) error
	// charge, when set, is asked before replace whether the change costs what an upload does
	// (true: it took a token of ns's upload rate); its error refuses the PUT, nothing changed.
	charge func(ns string, body, cur S) (bool, error)
	// admit, when set, decides a create (cur nil) or a replace of the stored spec cur with body:
	// its error refuses the write, nothing stored; a warning admits it, and warn (then required)
	// tells the caller, with the spec stored, once the write succeeded.
	admit func(body S, cur *S) (warning string, err error)
	warn  func(w http.ResponseWriter, r *http.Request, ns string, stored S, warning string)
}

func (k *kind[W, S, St]) list(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	objs, err := k.store.List(r.Context(), ns)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items := make([]W, 0, len(objs))
	for _, o := range objs {
		items = append(items, k.view(ns, o))
	}
	writeJSON(w, http.StatusOK, apiv1.List[W]{Items: items})
}

func (k *kind[W, S, St]) create(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns := pathVar(r, "ns")
		var body W
		if err := decode(w, r, &body); err != nil {
			writeError(w, r, err)
			return
		}
		name := *k.nameOf(&body)
		spec, err := k.validate(body)
		warning := ""
		if err == nil && k.admit != nil {
			warning, err = k.admit(spec, nil)
		}
		if err == nil {
			err = s.nsExists(r, ns)
		}
		if err == nil && k.refs != nil {
			err = k.refs(r, ns, spec)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		out, err := k.store.Create(r.Context(), ns, spec)
		if errors.Is(err, objects.ErrAlreadyExists) {
			err = apiv1.Errorf(apiv1.CodeAlreadyExists, "%s %q already exists", k.noun, name)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		if k.created != nil {
			k.created(r, ns, name)
		}
		if warning != "" {
			k.warn(w, r, ns, out.Spec, warning)
		}
		writeJSON(w, http.StatusCreated, k.view(ns, out))
	}
}

// name is the {name} of the request, checked.
func (k *kind[W, S, St]) name(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := pathVar(r, "name")
	if err := apiv1.ValidName(k.noun, name); err != nil {
		writeError(w, r, err)
		return "", false
	}
	return name, true
}

func (k *kind[W, S, St]) get(w http.ResponseWriter, r *http.Request) {
	name, ok := k.name(w, r)
	if !ok {
		return
	}
	ns := pathVar(r, "ns")
	o, err := k.store.Get(r.Context(), ns, name)
	if err != nil {
		writeError(w, r, notFound(k.noun, name, err))
		return
	}
	writeJSON(w, http.StatusOK, k.view(ns, o))
}

// put replaces what the body may change of the stored spec (k.replace): a body that names another
// object than the path is refused, since an object cannot be renamed.
func (k *kind[W, S, St]) put(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	var body W
	if err := decode(w, r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	if n := k.nameOf(&body); *n == "" {
		*n = name // the path names it
	} else if *n != name {
		writeError(w, r, invalid("the body names %s %q but the path %q; a %s cannot be renamed", k.noun, *n, name, k.noun))
		return
	}
	spec, err := k.validate(body)
	if err != nil {
		writeError(w, r, err)
		return
	}
	charged := false // a store that retries the update on a conflict is charged once
	warning := ""
	out, err := k.store.Update(r.Context(), ns, name, func(cur *S) error {
		if k.admit != nil {
			var err error
			if warning, err = k.admit(spec, cur); err != nil {
				return err
			}
		}
		if k.charge != nil && !charged {
			var err error
			if charged, err = k.charge(ns, spec, *cur); err != nil {
				return err
			}
		}
		return k.replace(spec, cur)
	})
	if err != nil {
		writeError(w, r, notFound(k.noun, name, err))
		return
	}
	if warning != "" {
		k.warn(w, r, ns, out.Spec, warning)
	}
	writeJSON(w, http.StatusOK, k.view(ns, out))
}

func (k *kind[W, S, St]) delete(w http.ResponseWriter, r *http.Request) {
	name, ok := k.name(w, r)
	if !ok {
		return
	}
	ns := pathVar(r, "ns")
	if err := k.store.Delete(r.Context(), ns, name); err != nil {
		writeError(w, r, notFound(k.noun, name, err))
		return
	}
	if k.deleted != nil {
		if err := k.deleted(r, ns, name); err != nil {
			writeError(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
