// Package memstore is an in-memory implementation of the API's stores, for unit tests only: it
// keeps nothing across restarts and builds nothing. Tests play the backend's controller through
// SetStatus.
package memstore
