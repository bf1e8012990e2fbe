package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a Function.
const (
	// FunctionBuilt: the image for the current code exists.
	FunctionBuilt = "Built"
	// FunctionReady: the current image serves.
	FunctionReady = "Ready"
)

// Phases (the seed's).
const (
	PhasePending  = "Pending"
	PhaseBuilding = "Building"
	PhaseReady    = "Ready"
	PhaseFailed   = "Failed"
)

func (s *FunctionStatus) set(t string, st metav1.ConditionStatus, reason, msg string, gen int64) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// MarkBuilding: a build of the current code started.
func (f *Function) MarkBuilding() {
	f.Status.Phase, f.Status.Message = PhaseBuilding, ""
	f.Status.set(FunctionBuilt, metav1.ConditionFalse, "Building", "building the image", f.Generation)
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Building", "waiting for the image", f.Generation)
}

// MarkInstallingDependencies: the build waits for the deps Job that fills the cache.
func (f *Function) MarkInstallingDependencies(job string) {
	msg := "installing dependencies: Job " + job
	f.Status.Phase, f.Status.Message = PhaseBuilding, msg
	f.Status.set(FunctionBuilt, metav1.ConditionFalse, "InstallingDependencies", msg, f.Generation)
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Building", "waiting for the image", f.Generation)
}

// MarkBuilt: the image for the current code exists.
func (f *Function) MarkBuilt(image string) {
	f.Status.Image, f.Status.BuiltCodeSHA256 = image, f.Spec.CodeSHA256
	f.Status.set(FunctionBuilt, metav1.ConditionTrue, "Built", image, f.Generation)
}

// MarkReady: the current image serves.
func (f *Function) MarkReady() {
	f.Status.Phase, f.Status.Message = PhaseReady, ""
	f.Status.set(FunctionReady, metav1.ConditionTrue, "Ready", "serving", f.Generation)
}

// MarkFailed: reason is a CamelCase cause (BuildFailed, DependenciesFailed, StartFailed), msg the details.
func (f *Function) MarkFailed(reason, msg string) {
	f.Status.Phase, f.Status.Message = PhaseFailed, msg
	f.Status.set(FunctionReady, metav1.ConditionFalse, reason, msg, f.Generation)
	if reason == "BuildFailed" || reason == "DependenciesFailed" {
		f.Status.set(FunctionBuilt, metav1.ConditionFalse, reason, msg, f.Generation)
	}
}

// MarkPending: waiting for code.
func (f *Function) MarkPending(msg string) {
	f.Status.Phase, f.Status.Message = PhasePending, msg
	f.Status.set(FunctionReady, metav1.ConditionFalse, "Pending", msg, f.Generation)
}
