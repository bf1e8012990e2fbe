// Package controllers holds the operator's reconcilers (controller-runtime): Function builds
// through the shared pipeline (package build, with dependency layers made by Jobs) and runs a
// Deployment and Service (scaled to 0 when its http triggers disable it); FunctionJob runs Jobs;
// Trigger runs cron triggers as CronJobs. They write status only; specs are the API's.
package controllers
