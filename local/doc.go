// Package local is the single-host backend behind `sless up`: it wires the state file
// (local/state), the embedded registry, the code store on disk, the shared build pipeline (package
// build, with dependency layers installed in place by a podman container that reaches the indexes
// only through the index proxy), the instance's networks (local/network), the podman runner
// (local/runner) and the runtime images (local/runtimeimages), and runs the controller: a
// rate-limited work queue (client-go's) whose reconcilers build uploaded code, run each function
// in a health-checked container /fn/ switches to, run jobs and cron triggers (with an injectable
// clock) as one-shot containers, write every status through package lifecycle, and restore all of
// it after a restart. Beside it the autoscaler starts and stops instances with the decider both
// backends share (package autoscale), from what /fn/'s activator sees.
package local
