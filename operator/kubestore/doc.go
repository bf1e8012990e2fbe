// Package kubestore implements the API's stores on the sless CRDs (operator/api/v1alpha1), so the
// same REST handlers serve the Kubernetes backend: a Function object per function (the uploaded
// code's sha256 is spec.codeSHA256, which the Function reconciler builds), Trigger and FunctionJob
// objects, tenant namespaces with their policy objects, invocation records in a bounded in-memory
// ring per function (lost on operator restart until a durable store exists), and the resolver
// that routes /fn/ to ready pods. The API writes specs only: metadata.generation counts their
// changes and the reconcilers alone write status, with status.observedGeneration.
package kubestore
