// Package kubestore is the Kubernetes backend of the REST API and /fn/: New assembles an
// objects.Backend on the sless CRDs (operator/api/v1alpha1) from a client and options (the code
// store, the tenant configuration, the informer cache /fn/ reads, pod logs, the invocation
// history, the scaler), each with its default documented, so the same handlers serve both
// backends. A function is a Function object (the uploaded code's sha256 is spec.codeSHA256, which
// the Function reconciler builds), triggers and jobs are Trigger and FunctionJob objects. Ensure
// creates a tenant namespace (labelled managed-by sless) and answers once the controller's
// TenantReconciler has provisioned it, within a bound. For /fn/ it gives the EndpointResolver (a
// function's ready and starting pods from its EndpointSlices, and whether its quota stops a
// scale-up) and the serving view (the objects /fn/ reads per request, from the cache); Logs reads
// function pods' logs through the kubelet and the logs of stopped pods the controller kept in the
// code store. Invocation records are kept in a bounded in-memory ring per function in each API
// replica (objects.InvocationRing) unless the operator is given PostgreSQL (api/pgstore). The API
// writes specs only: metadata.generation counts their changes and the reconcilers alone write
// status, with status.observedGeneration.
package kubestore
