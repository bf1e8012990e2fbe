// Package runspec is the contract between the platform and a running function, the same on both
// backends: the environment a function instance, a job run and a cron run get; the cron event
// (with scheduled_time); the labels sless puts on everything it runs (`sless.dev/…`, on pods and on
// podman containers alike) with typed roles; the port and user of every instance; the rule that
// switches a function off through its http triggers; and the /fn/ URL of a function. Image labels
// and annotations keep their OCI reverse-DNS keys (`dev.sless.*`, package oci).
package runspec
