// Package oci is the only package that knows the function image layout. It appends a cached
// dependency layer and a deterministic code layer onto a runtime image without downloading the
// runtime's layers, sets the config every runner relies on, and pushes only what is new with one
// long-lived remote.Pusher, cross-repository mounting the runtime's layers. It also deletes images
// with the same registry options.
package oci
