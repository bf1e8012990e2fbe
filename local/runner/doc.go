// Package runner runs functions on a single host as podman containers: it starts (or adopts,
// after a restart of sless up) a function's container, waits for its health check before /fn/ is
// switched to it, stops old ones while they finish their requests, and runs one-shot job and cron
// containers to completion, reading their result back safely. Containers carry runspec's labels
// and this instance's id; containers of an earlier sless up that carry the old `dev.sless.*`
// labels are found and adopted too. It decides nothing: the controller in package local does.
package runner
