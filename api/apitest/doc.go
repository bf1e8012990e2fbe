// Package apitest is the conformance suite of the API's backends: every route, the bad input each
// must refuse, and the /fn/ proxy, run through the real api.Server and the typed client against a
// backend's stores. Each backend's own tests call Run with its stores (the single host's bbolt
// state in local/state, the Kubernetes store on a real kube-apiserver in operator/kubestore, and
// the in-memory unit-test stores in api), so every backend answers every route the same way. Tests
// play the backend's controller (status writes) through the Controller a backend provides. Every
// Env's server checks each request it is sent and each answer it gives against the API's OpenAPI
// document (api/openapi.json; openapi.go says what is required), so the document and the handlers
// cannot drift apart on any backend.
package apitest
