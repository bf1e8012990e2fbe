// Package kubestore implements the API's stores on the sless CRDs (operator/api/v1alpha1), so the
// same REST handlers serve the Kubernetes backend: a Function object per function (the uploaded
// code's sha256 is spec.codeSHA256, which the Function reconciler builds), Trigger and FunctionJob
// objects, tenant namespaces with their policy objects, the resolver that routes /fn/ to ready
// pods, and function pods' logs. New assembles the whole objects.Backend from a client and
// options (the code store, the tenant configuration, the informer cache /fn/ reads, pod logs, the
// invocation history, the scaler), each with its default documented. The API writes specs only:
// metadata.generation counts their changes and the reconcilers alone write status, with
// status.observedGeneration.
package kubestore
