// Package objects is sless's object model and the contracts of its stores: what the API stores
// of a function, a trigger and a job (the spec it writes and the status each backend's controller
// writes, with their generations), the wire form derived from them, and the interfaces every
// backend implements for the REST API and /fn/ (Backend: the stores, the code store, the
// instances' logs, the invocation history, and where a function listens). Every store (local/state,
// operator/kubestore, api/memstore, api/pgstore) and both servers import it; it imports no server.
package objects
