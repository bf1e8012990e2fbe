package controllers_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/controllers"
)

// A scale-up the tenant's ResourceQuota stops (the ReplicaSet controller cannot create pods; the
// Deployment controller reports it as ReplicaFailure) is said in the function's status: the
// message names the quota, the ScaleLimited condition is set, and the function stays Ready even
// once the Deployment's progress deadline passes. Both go when the pods can be made. envtest runs
// neither a quota nor a ReplicaSet controller: the test writes the Deployment's status.
func TestScaleUpStoppedByTheTenantQuota(t *testing.T) {
	ns := "sless-0123456789abcdeb"
	e := newFnEnv(t, ns)
	e.start(func(sc *startConfig) { sc.reconciler = func(r *controllers.FunctionReconciler) { r.Autoscale = true } })
	ctx := context.Background()
	e.create("hot", e.upload("hot", map[string]string{"handler.py": "def handle(e):\n    return 1\n"}))
	eventually(t, "the deployment", func() bool { return e.deployment("hot") != nil && e.fn("hot").Status.Image != "" })
	setStatus := func(replicas, ready int32, conds ...appsv1.DeploymentCondition) {
		t.Helper()
		d := e.deployment("hot")
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: ready,
			AvailableReplicas: ready, Conditions: conds}
		if err := e.c.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	setStatus(1, 1)
	eventually(t, "Ready", func() bool { return e.fn("hot").Status.Phase == apiv1.PhaseReady })

	// The Scaler asks for 3; the quota allows 1 pod.
	d := e.deployment("hot")
	three := int32(3)
	d.Spec.Replicas = &three
	if err := e.c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	failure := `pods "hot-6b9f7c8d5-x2k4q" is forbidden: exceeded quota: sless-quota, requested: pods=1, used: pods=1, limited: pods=1`
	setStatus(1, 1,
		appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: failure},
		appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			Message: `ReplicaSet "hot-6b9f7c8d5" has timed out progressing.`})
	want := `scale-up stopped at 1 of 3 replicas by the tenant quota "sless-quota": ` + failure
	eventually(t, "the quota in the status", func() bool {
		f := e.fn("hot")
		return f.Status.Message == want && f.Status.IsScaleLimited()
	})
	f := e.fn("hot")
	if c := meta.FindStatusCondition(f.Status.Conditions, slessv1.FunctionScaleLimited); c.Reason != "QuotaExceeded" || c.Message != want {
		t.Errorf("condition %+v", c)
	}
	if f.Status.Phase != apiv1.PhaseReady || !meta.IsStatusConditionTrue(f.Status.Conditions, slessv1.FunctionReady) {
		t.Errorf("a function the quota keeps at 1 replica is not Ready: %+v", f.Status)
	}
	if err := lifecycletest.Wrote(lifecycletest.ScaleLimited, f.Status.Lifecycle()); err != nil {
		t.Error(err)
	}

	// A pod of the namespace went: the ReplicaSet gets its pods, the condition goes.
	setStatus(3, 3)
	eventually(t, "the quota message gone", func() bool {
		f := e.fn("hot")
		return !f.Status.IsScaleLimited() && !strings.Contains(f.Status.Message, "quota") && f.Status.Phase == apiv1.PhaseReady
	})
	if meta.FindStatusCondition(e.fn("hot").Status.Conditions, slessv1.FunctionScaleLimited) != nil {
		t.Error("the ScaleLimited condition stayed")
	}
	for _, k := range []lifecycletest.Kind{lifecycletest.Scaled, lifecycletest.Ready} {
		if err := lifecycletest.Wrote(k, e.fn("hot").Status.Lifecycle()); err != nil {
			t.Error(err)
		}
	}
}
