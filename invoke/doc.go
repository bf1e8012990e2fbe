// Package invoke serves /fn/ (DESIGN.md §5, §11): the public, unauthenticated entry to a Ready
// function, under /fn/{namespace}/{name} and, with a function domain, on each function's own host.
// It hosts the activator (routing, the hold queue, probes), confines what a function's answers may
// do to the shared origin, records every call in the backend's invocation history, keeps the
// per-function series, and reports its load to the autoscaler (LoadsHandler, Pokes). It reads the
// object model (package objects) and nothing of the REST API.
package invoke
