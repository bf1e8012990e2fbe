// Package podman runs podman the way sless needs it on a single host: sless's own containers.conf
// (cgroupfs and runc, which these hybrid-cgroup machines need), its own storage, and the few
// operations the single-host runner uses (run, list by label, inspect, wait, logs, remove). It
// knows nothing about functions; local decides what to run.
package podman
