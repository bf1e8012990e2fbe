// Package v1alpha1 holds the sless CRD types (group sless.dev): Function, Trigger and FunctionJob.
// Field names follow the seed system so its objects keep their meaning; status carries
// metav1.Conditions beside the seed's phase.
package v1alpha1
