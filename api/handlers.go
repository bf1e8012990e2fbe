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
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
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
	if errors.Is(err, objects.ErrNotFound) {
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

// --- functions, triggers, jobs: the routes every kind shares (kind), and what each adds

// kinds are the stored kinds' shared routes on s's backend.
type kinds struct {
	functions *kind[apiv1.Function, objects.FunctionSpec, lifecycle.FunctionStatus]
	triggers  *kind[apiv1.Trigger, objects.TriggerSpec, apiv1.TriggerStatus]
	jobs      *kind[apiv1.Job, objects.JobSpec, apiv1.JobStatus]
}

func (s *Server) kinds() kinds {
	return kinds{
		functions: &kind[apiv1.Function, objects.FunctionSpec, lifecycle.FunctionStatus]{
			noun: "function", store: s.b.Functions, validate: ValidateFunction,
			nameOf: func(f *apiv1.Function) *string { return &f.Name },
			view:   func(ns string, o objects.Function) apiv1.Function { return objects.FunctionView(s.o.publicURL, ns, o) },
			// A function re-created under an earlier one's name starts with no history: the
			// earlier one's build log and events (written behind its lifecycle, possibly after its
			// deletion) and its instances' kept logs go. Best effort: they are the author's view,
			// not the platform's state.
			created: func(r *http.Request, ns, name string) {
				fnlog.Forget(context.WithoutCancel(r.Context()), s.b.Code, ns, name)
			},
			deleted: s.functionDeleted,
			replace: func(spec objects.FunctionSpec, cur *objects.FunctionSpec) error {
				// The code is the upload's to change; the store moves the generation if anything else
				// did, and the function shows Pending until the backend has rolled the change out.
				spec.CodeSHA256 = cur.CodeSHA256
				*cur = spec
				return nil
			},
			charge: s.chargeRebuild,
			// The runtime's lifecycle: a blocked runtime takes no new function and no function
			// moving to it; a deprecated one (or a blocked one kept) is admitted with a warning.
			admit: func(spec objects.FunctionSpec, cur *objects.FunctionSpec) (string, error) {
				if spec.Async != nil && spec.Async.Enabled && s.b.Async == nil {
					return "", invalid("this installation keeps no asynchronous invocations (on Kubernetes the API needs --database-url); leave async.enabled off")
				}
				previous := ""
				if cur != nil {
					previous = cur.Runtime
				}
				return s.o.runtimes.Admit(spec.Runtime, previous)
			},
			warn: func(w http.ResponseWriter, r *http.Request, ns string, f objects.FunctionSpec, warning string) {
				s.warnRuntime(w, r, ns, f.Name, f.Runtime, f.CodeSHA256, warning)
			},
		},
		triggers: &kind[apiv1.Trigger, objects.TriggerSpec, apiv1.TriggerStatus]{
			noun: "trigger", store: s.b.Triggers, validate: ValidateTrigger,
			nameOf: func(t *apiv1.Trigger) *string { return &t.Name },
			view:   func(ns string, o objects.Trigger) apiv1.Trigger { return objects.TriggerView(s.o.publicURL, ns, o) },
			refs: func(r *http.Request, ns string, t objects.TriggerSpec) error {
				if !s.b.Runs(t.Type) {
					return invalid("this installation does not run %s triggers yet", t.Type)
				}
				return s.functionExists(r, ns, t.FunctionRef)
			},
		},
		jobs: &kind[apiv1.Job, objects.JobSpec, apiv1.JobStatus]{
			noun: "job", store: s.b.Jobs, validate: ValidateJob,
			nameOf: func(j *apiv1.Job) *string { return &j.Name },
			view:   func(_ string, o objects.Job) apiv1.Job { return objects.JobView(o) },
			refs: func(r *http.Request, ns string, j objects.JobSpec) error {
				return s.functionExists(r, ns, j.FunctionRef)
			},
			// The run_id rule (lifecycle.NewRunID): higher runs again, equal changes nothing, lower
			// is refused.
			replace: func(spec objects.JobSpec, cur *objects.JobSpec) error {
				if spec.FunctionRef != cur.FunctionRef {
					return invalid("function_ref is fixed once a job exists; delete and re-create the job to change it")
				}
				run, err := lifecycle.NewRunID(cur.RunID, spec.RunID)
				if err != nil {
					return invalid("%v", err)
				}
				if run {
					cur.RunID, cur.EventJSON = spec.RunID, spec.EventJSON
				}
				return nil
			},
		},
	}
}

// chargeRebuild counts a PUT that rebuilds the stored code (a new entrypoint or runtime: both are
// build inputs, build.Key) against ns's upload rate, as an upload of new code would be: else a
// tenant could queue builds without limit by alternating entrypoints. Without code there is
// nothing to build.
func (s *Server) chargeRebuild(ns string, spec, cur objects.FunctionSpec) (bool, error) {
	if cur.CodeSHA256 == "" || (spec.Entrypoint == cur.Entrypoint && spec.Runtime == cur.Runtime) {
		return false, nil
	}
	if wait := s.uploads.rebuild(ns); wait > 0 {
		return false, &apiv1.Error{Status: http.StatusTooManyRequests, Code: apiv1.CodeThrottled, RetryAfter: wait,
			Message: fmt.Sprintf("a new entrypoint or runtime rebuilds the function, which counts as an upload: too many for namespace %s (%g a minute on average); retry after %s",
				ns, s.o.uploadRate, wait.Round(time.Second))}
	}
	return true, nil
}

// functionDeleted removes what the API keeps of a deleted function: its archives (a backend may
// also remove them, harmlessly), its invocation records and /fn/'s state.
func (s *Server) functionDeleted(r *http.Request, ns, name string) error {
	if err := s.b.Code.DeletePrefix(r.Context(), codestore.Prefix(ns, name)); err != nil {
		return fmt.Errorf("deleting stored code of %s/%s: %w", ns, name, err)
	}
	if err := s.b.Invocations.Forget(r.Context(), ns, name); err != nil {
		return fmt.Errorf("deleting the invocation records of %s/%s: %w", ns, name, err)
	}
	if s.b.Async != nil {
		if err := s.b.Async.Forget(r.Context(), ns, name); err != nil {
			return fmt.Errorf("deleting the asynchronous invocations of %s/%s: %w", ns, name, err)
		}
	}
	s.fn.Forget(ns, name)
	return nil
}

// functionExists makes a reference to a missing function a user error at creation time.
func (s *Server) functionExists(r *http.Request, ns, name string) error {
	if _, err := s.b.Functions.Get(r.Context(), ns, name); err != nil {
		if errors.Is(err, objects.ErrNotFound) {
			return invalid("function_ref %q: no such function in this namespace; create it first", name)
		}
		return err
	}
	return nil
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
	q := objects.InvocationQuery{Limit: objects.DefaultInvocationLimit}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > objects.MaxInvocationLimit {
			writeError(w, r, invalid("limit %q must be between 1 and %d", v, objects.MaxInvocationLimit))
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
