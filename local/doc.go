// Package local is the single-host backend behind `sless up`: the API's stores in a bbolt file
// under the data dir, a controller that builds uploaded code in-process and runs each function as a
// podman container (host network, a free port, health-checked before the proxy switches to it), a
// cron scheduler with an injectable clock, one-shot job containers, and recovery of all of it after
// a restart. bbolt because it is pure Go, one file, transactional, and the state is a handful of
// small JSON records per function; no SQL is needed.
package local
