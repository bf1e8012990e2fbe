// Package controllers holds the operator's reconcilers (controller-runtime): Function builds
// through the shared pipeline (package build, with dependency layers made by Jobs) and runs a
// Deployment and Service (scaled to 0 when its http triggers disable it); FunctionJob runs Jobs;
// Trigger runs cron triggers as CronJobs. Beside them run the Scaler (replicas from every /fn/
// replica's load), the LogKeeper (stopped pods' logs) and the Collector (what no Function
// references any more). They write status only; specs are the API's. Setup wires all of them into
// a manager from one Config.
package controllers
