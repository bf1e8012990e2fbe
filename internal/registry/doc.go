// Package registry runs a CNCF Distribution (v3) registry in-process: filesystem storage, deletes
// enabled, relative URLs, on a listener the caller chooses (127.0.0.1:0 in tests). `sless up`, the
// demo and the integration tests all use it, so every push in them meets the real registry code.
package registry
