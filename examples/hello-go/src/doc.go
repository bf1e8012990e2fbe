// Command hello-go is a provided-runtime function: the upload's executable `bootstrap`, a plain
// HTTP server on $PORT (and $HOST when set) that answers GET /health and JSON on every other path.
// With JOB_MODE=1 it runs once on EVENT_JSON instead (a job or cron run): the result is printed as
// the last line of stdout and written to $TERMINATION_LOG, and the exit code says whether it
// succeeded. Build it with `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o ../code/bootstrap .`
// (a static binary: the provided base has no Go and no C toolchain, only libc, CA roots and zoneinfo).
package main
