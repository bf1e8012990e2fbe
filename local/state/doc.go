// Package state is the single host's state in one bbolt file under the data dir: the stores of
// package objects (functions, triggers, jobs, namespaces) with the knative split of spec and
// status — the API writes specs through objects.Store and each spec change moves the object's
// generation; the controller alone writes status through UpdateStatus, recording the generation
// it acted on — plus what the controller keeps about builds, the dependency layers' pins
// (deps.Pins), each tenant's range of host uids (UIDBase), and the invocation records. Records
// written by an earlier sless up (one JSON object with the code hash in its status) are migrated
// when the file is opened. bbolt because it is pure Go, one file, transactional, and the state is
// a handful of small JSON records per function; no SQL is needed.
package state
