package resources

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/runspec"
)

// A tenant's secret is a Secret sless-secret-<name> in its namespace, written by the API (which
// may not read it) and read by the kubelet alone. What the controller needs to know of it — that
// it exists, its keys and its version — the API records on the tenant Namespace, one annotation
// per secret: the controller reads no Secret.

// SecretPrefix begins the name of every tenant Secret: the only Secrets the API's account may
// write, and the only ones a function's pod may read (operator/config/rbac/admission.yaml).
const SecretPrefix = "sless-secret-"

// SecretAnnotationPrefix begins the annotation of each secret on its namespace.
const SecretAnnotationPrefix = "secret.sless.dev/"

// LabelSecret names the secret a tenant Secret holds.
const LabelSecret = "sless.dev/secret"

// AnnotationSecretVersions on a pod template names the versions of the secrets it uses
// (runspec.SecretRefs.Versions): a new value changes it, which rolls the pods.
const AnnotationSecretVersions = "sless.dev/secret-versions"

// SecretName is the Secret of the tenant's secret name.
func SecretName(name string) string { return SecretPrefix + name }

// SecretRecord is what the namespace's annotation says of a secret.
type SecretRecord struct {
	Version   int64     `json:"version"`
	Keys      []string  `json:"keys"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// SecretRecords are the secrets recorded on ns, by name. An annotation that does not parse is
// left out (as a missing secret: a start that needs it fails naming it).
func SecretRecords(ns *corev1.Namespace) map[string]SecretRecord {
	out := map[string]SecretRecord{}
	for k, v := range ns.Annotations {
		name, ok := strings.CutPrefix(k, SecretAnnotationPrefix)
		if !ok {
			continue
		}
		var r SecretRecord
		if json.Unmarshal([]byte(v), &r) == nil {
			out[name] = r
		}
	}
	return out
}

// MakeTenantSecret is the Secret of ns's secret name with data.
func MakeTenantSecret(ns, name string, data map[string]string) *corev1.Secret {
	d := make(map[string][]byte, len(data))
	for k, v := range data {
		d[k] = []byte(v)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(name), Namespace: ns, Labels: map[string]string{
			runspec.LabelManagedBy: runspec.ManagedBy, runspec.LabelTenantSecret: "true", LabelSecret: name}},
		Type: corev1.SecretTypeOpaque,
		Data: d,
	}
}

// FunctionSecrets is how fn uses its namespace's secrets, by runspec's rules.
func FunctionSecrets(fn *slessv1.Function) runspec.SecretRefs {
	refs := runspec.SecretRefs{Env: map[string]string{}, Files: map[string]string{}}
	for _, e := range fn.Spec.SecretEnv {
		refs.Env[e.Name] = e.Secret + "/" + e.Key
	}
	for _, f := range fn.Spec.SecretFiles {
		refs.Files[f.Path] = f.Secret
	}
	return refs
}

// SecretState is what ns's records say of the secrets fn uses: their versions (a new one rolls
// the pods) and which secret or key is missing ("" when none).
func SecretState(fn *slessv1.Function, ns *corev1.Namespace) (versions, missing string) {
	refs, recs := FunctionSecrets(fn), SecretRecords(ns)
	missing = refs.Missing(func(n string) ([]string, bool) { rec, ok := recs[n]; return rec.Keys, ok })
	return refs.Versions(func(n string) int64 { return recs[n].Version }), missing
}

// secretEnv are fn's secret variables, each read by the kubelet from its Secret when the container
// starts (the Secret must exist: the controller checks the namespace's records first).
func secretEnv(fn *slessv1.Function) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(fn.Spec.SecretEnv))
	for _, e := range fn.Spec.SecretEnv {
		out = append(out, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: SecretName(e.Secret)}, Key: e.Key}}})
	}
	return out
}

// secretFilesMode lets the function's user (not root, no fsGroup) read the files, and no one
// write them.
var secretFilesMode = int32(0o444)

// secretFiles mounts each of fn's secret_files read-only into the pod's first container.
func secretFiles(fn *slessv1.Function, pod *corev1.PodSpec) {
	for i, f := range fn.Spec.SecretFiles {
		name := "secret-" + strconv.Itoa(i)
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: SecretName(f.Secret), DefaultMode: &secretFilesMode}}})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: name, MountPath: f.Path, ReadOnly: true})
	}
}
