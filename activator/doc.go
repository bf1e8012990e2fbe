// Package activator is /fn/'s view of a function's instances: it routes each request to the ready
// instance with the fewest in flight, never more than the function's concurrency to one, holds
// requests that find no free slot (up to a bound) until an instance has one, probes starting
// instances' health itself so a new one serves as soon as it answers, and reports the load
// (in flight, held, per-instance activity) the autoscaling decider works from. It starts and
// stops nothing: a Source says where instances are, a Scaler is told when requests wait. No
// Kubernetes, no podman: both backends plug in.
package activator
