// Package autoscale decides how many instances of a function should run: from zero to
// max_replicas on the requests in flight and held at /fn/, with a 60 s stable window, a 6 s panic
// window that takes over at twice the current capacity (as Knative's KPA), and idle instances
// stopped after idle_timeout_sec. It is written once and used by both backends: the single host's
// podman controller and the Kubernetes operator.
//
// It owns the scale settings (Spec: defaults and ranges, restating apiv1's), the per-function windows fed by the
// proxies' counts (Record), and the decision (Decide: how many instances and which idle ones to
// stop). It does not start or stop anything, does not hold or route requests, does not enforce
// concurrency (the proxy does), and does not collect counts from the proxy replicas (its caller
// sums them). It is pure Go with an injectable clock and no I/O.
package autoscale
