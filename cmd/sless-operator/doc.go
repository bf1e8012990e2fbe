// Command sless-operator runs the Kubernetes backend in one binary: with --role=api the REST API
// and the /fn/ proxy on kubestore (which reaches functions at their ready pods), with
// --role=controller the reconcilers, the Scaler, the LogKeeper and the Collector
// (controllers.Setup) on the leader of its Lease and the index proxy on every replica, with
// --role=all both in one process. It is one cobra command; the flags it shares with `sless up`
// are the option groups of cmd/internal/options. main.go parses and starts; the other files only
// connect what kubestore.New, controllers.Setup and api.New assemble. Only this package (and
// cmd/internal/options) reads flags and the environment.
package main
