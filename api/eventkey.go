package api

import "github.com/sless-dev/sless/invoke"

// WithEventKey lets event sources outside this process (a Kubernetes namespace's rabbitmq
// consumer) call /fn/ as Events' callers do, and report their deliveries (POST
// /events/{ns}/deliveries), with the token apiv1.EventToken(key, ns) for their
// namespace ns in apiv1.HeaderEventToken (invoke.WithEventKey). The default trusts no token.
func WithEventKey(key []byte) Option {
	return func(o *options) { o.eventKey, o.invoke = key, append(o.invoke, invoke.WithEventKey(key)) }
}
