// Package api is the sless REST API (DESIGN.md §5): one router with every route of the contract,
// verified JWT auth, the upload path into the code store and the public /fn/ invoke proxy. It keeps
// no state of its own: the platform behind it (single host or Kubernetes) supplies the stores, the
// code store and the resolver through the small interfaces in stores.go. It writes specs only;
// the wire form adds what is derived (URLs, and Pending while the backend's controller has not
// observed the current generation) to the status the controller wrote.
package api
