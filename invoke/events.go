package invoke

import (
	"context"
	"net/http"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
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

// dropEventHeaders removes what only an event source may send.
func dropEventHeaders(h http.Header) {
	for k := range h {
		if len(k) > len(apiv1.HeaderEventPrefix) && strings.EqualFold(k[:len(apiv1.HeaderEventPrefix)], apiv1.HeaderEventPrefix) {
			delete(h, k)
		}
	}
}
