// Package resources builds the Kubernetes objects the operator owns for sless objects, as pure
// functions (knative's resources/ style): a Function's Deployment and Service, a FunctionJob's Job,
// a cron Trigger's CronJob, a dependency install Job, and a tenant namespace's objects. What runs
// in them follows the run contract (package runspec: env, cron event, labels, port, uid).
// Reconcilers create or update exactly these; tests compare them field by field.
package resources
