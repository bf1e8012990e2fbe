// Package oci is the only package that knows the function image layout. It appends a
// deterministic code layer (and, later, a cached dependency layer) onto a runtime image without
// downloading the runtime's layers, sets the config every runner relies on, and pushes only what is
// new with one long-lived remote.Pusher, cross-repository mounting the runtime's layers.
package oci
