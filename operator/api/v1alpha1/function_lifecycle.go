package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// Condition types of a Function.
const (
	// FunctionBuilt: the image for the current code exists.
	FunctionBuilt = "Built"
	// FunctionReady: the current image serves.
	FunctionReady = "Ready"
	// FunctionScaleLimited: the Deployment cannot get the pods it is scaled to (the tenant's
	// quota is used up; reason QuotaExceeded). Absent when nothing stops it.
	FunctionScaleLimited = "ScaleLimited"
)

func (s *FunctionStatus) set(t string, st metav1.ConditionStatus, reason, msg string, gen int64) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// MarkBuilding: a build of the current code started.
func (f *Function) MarkBuilding() {
	f.Status.Phase, f.Status.Message = apiv1.PhaseBuilding, ""
	f.Status.set(FunctionBuilt, metav1.ConditionFalse, "Building", "building the image", f.Generation)
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Building", "waiting for the image", f.Generation)
}

// MarkInstallingDependencies: the build waits for what fills the dependency cache (msg says what).
func (f *Function) MarkInstallingDependencies(msg string) {
	f.Status.Phase, f.Status.Message = apiv1.PhaseBuilding, msg
	f.Status.set(FunctionBuilt, metav1.ConditionFalse, "InstallingDependencies", msg, f.Generation)
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Building", "waiting for the image", f.Generation)
}

// MarkBuilt: the image for the current code exists; b describes its build.
func (f *Function) MarkBuilt(image string, b BuildStatus) {
	f.Status.Image, f.Status.BuiltCodeSHA256, f.Status.Build, f.Status.FailedBuildKey = image, f.Spec.CodeSHA256, &b, ""
	f.Status.set(FunctionBuilt, metav1.ConditionTrue, "Built", image, f.Generation)
}

// MarkReady: the current image serves.
func (f *Function) MarkReady() {
	f.Status.Phase, f.Status.Message = apiv1.PhaseReady, ""
	f.Status.set(FunctionReady, metav1.ConditionTrue, "Ready", "serving", f.Generation)
}

// MarkFailed: reason is a CamelCase cause (BuildFailed, DependenciesFailed, StartFailed), msg the details.
// A build failure that is the function's own latches: failedBuildKey is that build's key.
func (f *Function) MarkFailed(reason, msg string) {
	f.Status.Phase, f.Status.Message = apiv1.PhaseFailed, msg
	f.Status.set(FunctionReady, metav1.ConditionFalse, reason, msg, f.Generation)
	if reason == "BuildFailed" || reason == "DependenciesFailed" {
		f.Status.set(FunctionBuilt, metav1.ConditionFalse, reason, msg, f.Generation)
	}
}

// MarkBuildRetrying: the platform failed this build in a way that passes (a registry or code
// store that did not answer, answered 5xx or throttled) and tries again: still Building, so that
// clients waiting for Ready (Terraform, the CLI) wait on; the message says why and when.
func (f *Function) MarkBuildRetrying(reason, msg string) {
	f.Status.Phase, f.Status.Message = apiv1.PhaseBuilding, msg
	f.Status.set(FunctionBuilt, metav1.ConditionFalse, reason, msg, f.Generation)
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Building", "waiting for the image", f.Generation)
}

// MarkPending: waiting for code.
func (f *Function) MarkPending(msg string) {
	f.Status.Phase, f.Status.Message = apiv1.PhasePending, msg
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Pending", msg, f.Generation)
}

// MarkScaleLimited: the Deployment cannot get the pods it is scaled to; msg (also the status
// message) says what stops it.
func (f *Function) MarkScaleLimited(reason, msg string) {
	f.Status.Message = msg
	f.Status.set(FunctionScaleLimited, metav1.ConditionTrue, reason, msg, f.Generation)
}

// ClearScaleLimited: nothing stops the Deployment's pods now; the message goes with the condition.
func (f *Function) ClearScaleLimited() {
	if c := meta.FindStatusCondition(f.Status.Conditions, FunctionScaleLimited); c != nil && c.Message == f.Status.Message {
		f.Status.Message = ""
	}
	meta.RemoveStatusCondition(&f.Status.Conditions, FunctionScaleLimited)
}

// IsScaleLimited reports whether the Deployment cannot get the pods it is scaled to.
func (s *FunctionStatus) IsScaleLimited() bool {
	return meta.IsStatusConditionTrue(s.Conditions, FunctionScaleLimited)
}
