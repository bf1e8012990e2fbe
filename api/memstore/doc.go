// Package memstore is an in-memory implementation of the stores' contracts (package objects), for
// unit tests only: it keeps nothing across restarts and builds nothing. Tests play the backend's
// controller through SetStatus.
package memstore
