// Package controllers holds the operator's reconcilers (controller-runtime) and the controller
// leader's background work; Setup wires all of them into a manager from one Config.
// FunctionReconciler builds through the shared pipeline (package build; a dependency cache miss
// runs a deps Job and the build waits for it), runs a Deployment pinned by digest and a Service
// (zero replicas when its http triggers disable it), deletes the function's other image versions
// once a rollout is done, and removes its code and images through a finalizer;
// FunctionJobReconciler runs a FunctionJob as a Job and reads the result from its pod's
// termination message; TriggerReconciler gives http triggers their URL and runs cron triggers as
// CronJobs; TenantReconciler provisions every tenant namespace the API creates (pod security,
// quota, limits, network policies, pull secret) and keeps it at the operator's flags. A Function's
// and a FunctionJob's status move only through package lifecycle, the state machine the single
// host shares; the reconcilers write status only, specs are the API's. On the leader beside them:
// the Scaler sets running functions' replicas with the shared decider (package autoscale) from the
// load a LoadScraper sums over every API replica (/loads, /pokes); the LogKeeper keeps the last
// lines of function pods that stop; the Collector deletes dependency layers no build uses (with
// their pins, ConfigMapPins) and images finalizers gave up on.
package controllers
