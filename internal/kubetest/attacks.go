package kubetest

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Attack is one write an attacker with code execution in a sless process would try with its
// account; the install must refuse it (Forbidden).
type Attack struct {
	Name string
	Do   func(ctx context.Context, c client.Client) error
}

// The victims PlantVictims puts in place: a namespace sless does not manage, with a Secret and a
// pod, and a ConfigMap in kube-system.
const (
	VictimSecret    = "db-password"
	VictimPod       = "db"
	VictimConfigMap = "sless-victim"
)

// PlantVictims makes, as admin, what EscapeAttacks aim at in namespace victim (created here) and in
// kube-system. The pod names a node that does not exist: no kubelet runs or pulls it.
func PlantVictims(ctx context.Context, admin client.Client, victim string) error {
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: victim}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: VictimSecret, Namespace: victim}, StringData: map[string]string{"password": "hunter2"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: VictimPod, Namespace: victim},
			Spec: corev1.PodSpec{NodeName: "sless-no-such-node", Containers: []corev1.Container{{Name: "db", Image: "sless.invalid/db"}}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: VictimConfigMap, Namespace: "kube-system"}, Data: map[string]string{"k": "v"}},
	} {
		if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// VictimJob is a Job in ns that runs as its namespace's default account and mounts Secret
// secret; edit changes its pod spec further (nil: none).
func VictimJob(ns, secret string, edit func(*corev1.PodSpec)) *batchv1.Job {
	no, yes := false, true
	spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, NodeName: "sless-no-such-node",
		Containers: []corev1.Container{{Name: "c", Image: "sless.invalid/steal", Command: []string{"cat", "/s/password"},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, RunAsNonRoot: &yes},
			VolumeMounts:    []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}}},
		Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}}
	if edit != nil {
		edit(&spec)
	}
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
}

// EscapeAttacks are the first things to try from a compromised sless process, against the
// victims PlantVictims made: a Job mounting the victim namespace's Secret, a patch of its pod, a
// ConfigMap update and a Secret create in kube-system.
func EscapeAttacks(victim string) []Attack {
	return []Attack{
		{"a Job mounting a Secret in a namespace sless does not manage", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, VictimJob(victim, VictimSecret, nil))
		}},
		{"a pod patch in a namespace sless does not manage", func(ctx context.Context, c client.Client) error {
			return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: VictimPod, Namespace: victim}},
				client.RawPatch(types.StrategicMergePatchType, []byte(`{"metadata":{"annotations":{"sless.dev/owned":"yes"}}}`)))
		}},
		{"a ConfigMap update in kube-system", func(ctx context.Context, c client.Client) error {
			return c.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: VictimConfigMap, Namespace: "kube-system"}, Data: map[string]string{"k": "evil"}})
		}},
		{"a Secret create in kube-system", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-evil", Namespace: "kube-system",
				Labels: map[string]string{"sless.dev/tenant-secret": "true", "app.kubernetes.io/managed-by": "sless-operator"}}})
		}},
	}
}

// Refused reports whether err is the API server's refusal by RBAC or an admission policy
// (Forbidden), not another failure (an invalid object, a timeout).
func Refused(err error) bool { return apierrors.IsForbidden(err) }
