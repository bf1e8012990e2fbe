// Package runner runs functions on a single host as podman containers, on the instance's own
// network and in the tenant's uid range. Per function it keeps the instances of its serving
// version that /fn/ routes to (routing.go): a new version's first container must pass its health
// check before /fn/ is switched to it, further instances start and stop as the autoscaler asks
// (from a created-but-stopped spare when there is one), and old ones are taken out of /fn/ before
// they finish their requests and are removed (containers.go). After a restart of sless up it
// adopts its running containers (adopt.go); containers of an earlier sless up that carry the old
// `dev.sless.*` labels are found and adopted too. It runs one-shot job and cron containers to
// completion and reads their result back safely (runs.go), gives each container its private
// variables in a file only its user reads, keeps each container's output in a file of its own
// (logs.go), and counts what each namespace's containers take against its Limits (quota.go). It
// decides nothing: the controller and the autoscaler in package local do.
package runner
