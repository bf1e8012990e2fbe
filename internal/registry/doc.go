// Package registry runs a CNCF Distribution (v3) registry in-process: filesystem storage, deletes
// enabled, relative URLs, on a listener the caller chooses (127.0.0.1:0 in tests). With Config.Auth
// it uses Distribution's token authentication and serves the token endpoint (regauth) on the same
// listener, so the realm is reachable wherever the registry is. `sless up`, `sless registry`, the
// demo and the integration tests all use it, so every push in them meets the real registry code.
//
// Garbage collection is in two steps. Manifests are deleted online, through the API, by whoever
// knows they are unused (build.Pipeline.CollectImages, CollectDeps). Sweep reclaims the blobs no
// remaining manifest references, with Distribution's mark-and-sweep, only while no registry serves
// the directory (Config.SweepAtStart): run against a live registry it would delete blobs uploaded
// for a manifest not yet pushed.
package registry
