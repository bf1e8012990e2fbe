// Package oci is the only package that knows the function image layout (README.md). It appends a
// cached dependency layer and a deterministic code layer onto a runtime image without downloading
// the runtime's layers, sets the config every runner relies on, and pushes only what is new with
// one long-lived remote.Pusher, cross-repository mounting the runtime's layers. Runtime images
// (a language base plus the runtime's server layer) are built the same way. With the same registry
// options it also tags, lists, resolves and deletes images for the build pipeline.
package oci
