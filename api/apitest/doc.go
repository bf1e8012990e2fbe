// Package apitest is the conformance suite of the API's backends: every route, the bad input each
// must refuse, and /fn/ (package invoke, which the server hosts), run through the real api.Server
// and the typed client against a backend's objects.Backend. Each backend's own tests call Run with
// its stores (the single host's bbolt state in local/state, the Kubernetes store on a real
// kube-apiserver in operator/kubestore, api/memstore in api's own tests, and memstore with the
// invocation history in PostgreSQL in api/pgstore), so every backend answers every route the same
// way. Tests play the backend's controller (status writes) through the Controller a backend
// provides. Every Env's server checks each request it is sent and each answer it gives against the
// API's OpenAPI document (api/openapi.json; openapi.go says what is required), so the document and
// the handlers cannot drift apart on any backend.
package apitest
