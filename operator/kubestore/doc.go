// Package kubestore is the Kubernetes backend of the REST API and /fn/: New makes an
// objects.Backend on the sless CRDs (operator/api/v1alpha1), so the same handlers serve both
// backends. A function is a Function object (the uploaded code's sha256 is spec.codeSHA256, which
// the Function reconciler builds), triggers and jobs are Trigger and FunctionJob objects, and a
// tenant namespace comes with its policy objects (quota, limits, network policies, pull secret),
// brought up to the operator's flags on ensure and, for every tenant, by EnsureTenants. For /fn/
// it gives the EndpointResolver (a function's ready and starting pods from its EndpointSlices, and
// whether its quota stops a scale-up) and ServingView (the objects /fn/ reads per request, from the
// cache); Logs reads function pods' logs through the kubelet and the logs of stopped pods the
// controller kept in the code store. Invocation records are kept in a bounded in-memory ring per
// function in each API replica (objects.InvocationRing) unless the operator is given PostgreSQL
// (api/pgstore). The API writes specs only: metadata.generation counts their changes and the
// reconcilers alone write status, with status.observedGeneration.
package kubestore
