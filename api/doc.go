// Package api is the sless REST server (DESIGN.md §5): one router with every /v1 route of the
// contract behind verified JWTs (api/auth), the upload path into the code store (checked with the
// builder's archive rules, rate-limited per namespace), the invocation history, logs and events
// (NDJSON, followed), /healthz, /readyz and /openapi.json; /metrics is MetricsHandler's, on a
// listener of its own (its series name every tenant's functions). Functions, triggers and jobs
// are served by one generic shape per kind (kinds.go: list, create, get, replace, delete), each
// kind adding only its own rules. /fn/ is package invoke's: New puts an invoke.Proxy in front of
// the router and its series on the server's registry, beside the server's own metrics
// (sless_http_*, sless_upload_bytes) and whatever a backend adds (Metrics: build.Metrics, the
// invocation history's). It keeps no state of its own: the platform behind it (single host or
// Kubernetes) supplies an objects.Backend — the stores, the code store, instances' logs, the
// invocation history and the resolver. It writes specs only; the wire form (objects' views) adds
// what is derived (URLs, and Pending while the backend's controller has not observed the current
// generation) to the status the controller wrote.
package api
