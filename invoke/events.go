package invoke

import (
	"context"
	"net/http"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

type eventsKey struct{}

// Events is /fn/ for the platform's own event sources (a rabbitmq trigger's consumer in the same
// process): the request's X-Sless-Event-* headers are kept for the function and its invocation
// is recorded with its source and message id. It must never be reachable from outside.
func (p *Proxy) Events() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), eventsKey{}, true)))
	})
}

// WithEventKey lets event sources outside this process (a Kubernetes namespace's rabbitmq
// consumer) be trusted as Events is: a request to /fn/{ns}/… whose apiv1.HeaderEventToken is
// apiv1.EventToken(key, ns) keeps its X-Sless-Event-* headers. The token is always removed before
// the function sees the request, and never accepted on a function's own host. The default (no
// key) trusts no token.
func WithEventKey(key []byte) Option {
	return func(o *options) { o.eventKey = append([]byte(nil), key...) }
}

// trustsEvents reports whether r comes from one of the platform's event sources: through Events,
// or with a valid token for the namespace in its /fn/ path. It removes the token either way.
func (p *Proxy) trustsEvents(r *http.Request) bool {
	token := r.Header.Get(apiv1.HeaderEventToken)
	r.Header.Del(apiv1.HeaderEventToken)
	if r.Context().Value(eventsKey{}) != nil {
		return true
	}
	if token == "" || len(p.o.eventKey) == 0 {
		return false
	}
	if p.o.fnDomain != "" {
		if _, _, under, _ := runspec.SplitFunctionHost(p.o.fnDomain, r.Host); under {
			return false // a function's own host: its path names no namespace
		}
	}
	ns, _, _, ok := splitFnPath(r.URL.EscapedPath())
	return ok && apiv1.ValidEventToken(p.o.eventKey, ns, token)
}

// dropEventHeaders removes what only an event source may send.
func dropEventHeaders(h http.Header) {
	for k := range h {
		if len(k) > len(apiv1.HeaderEventPrefix) && strings.EqualFold(k[:len(apiv1.HeaderEventPrefix)], apiv1.HeaderEventPrefix) {
			delete(h, k)
		}
	}
}
