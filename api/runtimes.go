package api

import (
	"context"
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
)

// listRuntimes is GET /v1/runtimes: the catalog under the install's policy, each runtime with the
// image by digest this install builds its functions on (none where the backend has no image for it).
func (s *Server) listRuntimes(w http.ResponseWriter, r *http.Request) {
	items := s.o.runtimes.List()
	if s.b.RuntimeImages != nil {
		for i := range items {
			items[i].Image, _ = s.b.RuntimeImages.RuntimeImage(items[i].Name)
		}
	}
	writeJSON(w, http.StatusOK, apiv1.RuntimeList{Items: items})
}

// warnRuntime tells the caller of a function write admitted with a warning: a `Warning: 299`
// header on the answer (set before it is written), and a Warning event on the function, in its
// event log before the answer goes (so …/events shows it to whoever reads it next).
func (s *Server) warnRuntime(w http.ResponseWriter, r *http.Request, ns, name, rt, codeSHA256, warning string) {
	if warning == "" {
		return
	}
	w.Header().Add("Warning", apiv1.WarningHeader(warning))
	reason := apiv1.ReasonRuntimeDeprecated
	if rtInfo, _ := s.o.runtimes.Lookup(rt); rtInfo.Status == apiv1.RuntimeBlocked {
		reason = apiv1.ReasonRuntimeBlocked
	}
	// Best effort, as every event: the answer's header is the caller's warning.
	s.warnings.Record(context.WithoutCancel(r.Context()), ns, name,
		apiv1.Event{Type: apiv1.EventWarning, Reason: reason, Message: warning, CodeSHA256: codeSHA256})
	s.warnings.Flush()
}
