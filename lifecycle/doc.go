// Package lifecycle is the one state machine of a function's and a job's status (knative's
// *_lifecycle.go): pure functions from (status, event) to status, with no I/O and no clock of
// their own. Both backends' controllers (package local and operator/controllers) move a status
// only through Next and NextJob, so the single host and Kubernetes report the same phase, message
// and conditions for the same thing, and retry a failing build within the same budget. It also
// holds the rules that decide from a status what to do next: whether a build is due or latched,
// and the jobs' run_id rule.
package lifecycle
