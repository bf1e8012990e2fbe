package resources

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/runspec"
)

// PullSecret is the registry pull secret every pod references (created by namespace ensure).
const PullSecret = "sless-registry"

// IndexProxyService is the Service (in the operator's namespace) of the index proxy deps Jobs'
// installers go through, and IndexProxyPort its port.
const (
	IndexProxyService = "sless-index-proxy"
	IndexProxyPort    = 3128
)

// Labels of a function's objects and pods in role r: runspec's, and managed-by the operator.
func Labels(fn string, r runspec.Role) map[string]string {
	l := runspec.Labels(fn, r)
	l[runspec.LabelManagedBy] = runspec.ManagedBy
	return l
}

// selector picks a function's pods in role r (without the managed-by label, so that selectors
// stay what they were when Deployments were first made: a selector is immutable).
func selector(fn string, r runspec.Role) map[string]string { return runspec.Labels(fn, r) }

// env converts runspec's variables.
// env converts runspec's variables. Kubernetes expands $(NAME) in env values; a user's value (and
// a job's event) must arrive as written, so its "$" is escaped as "$$".
func env(vars []runspec.EnvVar) []corev1.EnvVar {
	out := make([]corev1.EnvVar, len(vars))
	for i, v := range vars {
		value := v.Value
		if runspec.Private(v.Name) {
			value = strings.ReplaceAll(value, "$", "$$")
		}
		out[i] = corev1.EnvVar{Name: v.Name, Value: value}
	}
	return out
}

func instance(fn *slessv1.Function) runspec.Instance {
	vars := map[string]string{}
	for _, e := range fn.Spec.Env {
		vars[e.Name] = e.Value
	}
	return runspec.Instance{EnvVars: vars, TimeoutSec: int(fn.Spec.TimeoutSec)}
}

func ownerRef(obj metav1.Object, kind string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: slessv1.GroupVersion.String(), Kind: kind, Name: obj.GetName(), UID: obj.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &yes}}
}

// restricted is the pod-security "restricted" profile: non-root, no privilege escalation, no
// capabilities, RuntimeDefault seccomp, read-only root filesystem (a small /tmp is mounted).
func restrictedPod(spec *corev1.PodSpec) {
	nonRoot, uid, gid, no := true, int64(runspec.UID), int64(runspec.GID), false
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot, RunAsUser: &uid, RunAsGroup: &gid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	spec.AutomountServiceAccountToken = &no
	spec.EnableServiceLinks = &no
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: PullSecret}}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: resource.NewQuantity(64<<20, resource.BinarySI)}}})
	for i := range spec.Containers {
		restrictedContainer(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		restrictedContainer(&spec.InitContainers[i])
	}
}

// PolicyGate makes image's `sless policy-wait` the pod's first init container, so that none of its
// code runs before the enforcer has applied the namespace's NetworkPolicy to the new pod (an
// enforcer such as kube-router does so a moment after the pod starts). "" leaves spec alone.
func PolicyGate(spec *corev1.PodSpec, image string) {
	if image == "" {
		return
	}
	c := corev1.Container{Name: "wait-network-policy", Image: image, Command: []string{"sless", "policy-wait"},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}
	restrictedContainer(&c)
	spec.InitContainers = append([]corev1.Container{c}, spec.InitContainers...)
}

func restrictedContainer(c *corev1.Container) {
	no, yes := false, true
	c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
}

func memory(fn *slessv1.Function) corev1.ResourceRequirements {
	m := resource.MustParse(fmt.Sprintf("%dMi", max(fn.Spec.MemoryMB, 64)))
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: m, corev1.ResourceCPU: resource.MustParse("25m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: m},
	}
}

// DeploymentName and ServiceName of a function.
func DeploymentName(fn string) string { return fn }
func ServiceName(fn string) string    { return fn }

// preStopSleep is how long a function pod keeps serving after it is told to stop.
const preStopSleep = 3

// ProgressDeadline is how long a rollout may take before the Function reports StartFailed (a
// crash-looping or unpullable new version).
const ProgressDeadline = 180

var progressDeadline = int32(ProgressDeadline)

// MakeDeployment is a function's Deployment: its image pinned by digest, replicas as the Function
// reconciler decides (0 when its http triggers are all disabled), ready when /health answers.
func MakeDeployment(fn *slessv1.Function, image string, replicas int32) *appsv1.Deployment {
	labels := Labels(fn.Name, runspec.RoleFunction)
	grace := int64(runspec.GraceSec(int(fn.Spec.TimeoutSec)) + 3 + preStopSleep)
	pod := corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name:      "function",
			Image:     image,
			Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: runspec.Port}},
			Env:       append(env(runspec.Env(instance(fn))), secretEnv(fn)...),
			Resources: memory(fn),
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: runspec.HealthPath, Port: intstr.FromInt32(runspec.Port)}},
				PeriodSeconds: 1, FailureThreshold: 3,
			},
			// A terminating pod keeps serving while its endpoint is withdrawn (kube-proxy and the
			// proxy's connections lag the deletion by up to a second or so); without this, a rollout
			// drops the requests routed to an old pod that already exited.
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStopSleep}}},
		}},
	}
	secretFiles(fn, &pod)
	restrictedPod(&pod)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: DeploymentName(fn.Name), Namespace: fn.Namespace, Labels: labels, OwnerReferences: ownerRef(fn, "Function")},
		Spec: appsv1.DeploymentSpec{
			Replicas:                &replicas,
			ProgressDeadlineSeconds: &progressDeadline,
			Selector:                &metav1.LabelSelector{MatchLabels: selector(fn.Name, runspec.RoleFunction)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptrIntStr(intstr.FromInt32(0)), MaxSurge: ptrIntStr(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// MakeService is a function's Service (port 80 → the runtime's 8080).
func MakeService(fn *slessv1.Function) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName(fn.Name), Namespace: fn.Namespace, Labels: Labels(fn.Name, runspec.RoleFunction), OwnerReferences: ownerRef(fn, "Function")},
		Spec: corev1.ServiceSpec{
			Selector: selector(fn.Name, runspec.RoleFunction),
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(runspec.Port)}},
		},
	}
}

// jobPod runs the function image once in job mode with the event.
func jobPod(fn *slessv1.Function, image, eventJSON string, role runspec.Role, extra ...corev1.EnvVar) corev1.PodTemplateSpec {
	pod := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{
			Name: "function", Image: image, Resources: memory(fn),
			// TERMINATION_LOG is said, not assumed, so a provided bootstrap knows where to write.
			Env: append(append(append(env(runspec.JobEnv(instance(fn), eventJSON)),
				corev1.EnvVar{Name: runspec.EnvTerminationLog, Value: corev1.TerminationMessagePathDefault}), secretEnv(fn)...), extra...),
			// Job mode writes its result (≤ 4 KiB) here; the operator reads it as the message. A
			// run that failed without writing one (a provided bootstrap that crashed) leaves the
			// end of its output instead, as the single host reports it.
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
	}
	secretFiles(fn, &pod)
	restrictedPod(&pod)
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: Labels(fn.Name, role)}, Spec: pod}
}

// JobName of a FunctionJob's run.
func JobName(fj *slessv1.FunctionJob, runID int64) string {
	return fmt.Sprintf("%s-run-%d", fj.Name, runID)
}

// MakeJob is one run of a FunctionJob.
func MakeJob(fj *slessv1.FunctionJob, fn *slessv1.Function, image string) *batchv1.Job {
	backoff := int32(0)
	deadline := int64(max(fn.Spec.TimeoutSec, 1) + 60)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(fj, fj.Spec.RunID), Namespace: fj.Namespace, Labels: Labels(fn.Name, runspec.RoleJob),
			OwnerReferences: ownerRef(fj, "FunctionJob")},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, ActiveDeadlineSeconds: &deadline, Template: jobPod(fn, image, fj.Spec.EventJSON, runspec.RoleJob)},
	}
}

// jobNameLabel is the label the Job controller puts on a Job's pods with the Job's name.
const jobNameLabel = "batch.kubernetes.io/job-name"

// MakeCronJob runs a function on a cron Trigger's schedule. A CronJob's template is the same for
// every run, so the event it carries has no scheduled_time: the pod gets the name of its Job,
// which the CronJob controller derives from the scheduled time, and the runtime fills
// scheduled_time from it (runspec.EnvCronJob).
func MakeCronJob(tr *slessv1.Trigger, fn *slessv1.Function, image string) *batchv1.CronJob {
	backoff := int32(0)
	deadline := int64(60)
	suspend := tr.Spec.Enabled != nil && !*tr.Spec.Enabled
	history := int32(3)
	jobName := corev1.EnvVar{Name: runspec.EnvCronJob, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.labels['" + jobNameLabel + "']"}}}
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: CronJobName(tr.Name), Namespace: tr.Namespace, Labels: Labels(fn.Name, runspec.RoleCron), OwnerReferences: ownerRef(tr, "Trigger")},
		Spec: batchv1.CronJobSpec{
			Schedule:                   tr.Spec.Schedule,
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    &deadline,
			Suspend:                    &suspend,
			SuccessfulJobsHistoryLimit: &history,
			FailedJobsHistoryLimit:     &history,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{BackoffLimit: &backoff,
				Template: jobPod(fn, image, runspec.CronEvent(tr.Name, time.Time{}), runspec.RoleCron, jobName)}},
		},
	}
}

// CronJobName of a cron trigger. The CronJob controller appends "-<11 digits>" to it for each Job,
// and a Job's name becomes a pod label of at most 63 characters: it is cut to 52.
func CronJobName(trigger string) string {
	n := "cron-" + trigger
	return strings.TrimRight(n[:min(len(n), 52)], "-")
}

// DepsJob describes a dependency install: the runtime image runs the installer into a shared
// emptyDir, then the operator image layers and pushes it (`sless deps push`).
type DepsJob struct {
	Namespace, Name string
	Function        string
	RuntimeImage    string
	Argv, Env       []string
	Manifests       map[string]string // file name -> content, mounted at /in
	OperatorImage   string
	PushTo          string // <registry>/sless/deps/<key>:latest
	DepsDir         string // /app/deps or /app/node_modules
	// PushSecret names the Secret (DepsPushSecret) with the one credential of the Job: a push
	// credential for this key only, mounted into the push container only.
	PushSecret string
	// Proxy is the index proxy's URL the installer goes through (HTTP_PROXY); "" for none.
	Proxy string
	// Insecure pushes over plain HTTP (a test cluster's registry).
	Insecure bool
}

// depsScratch bounds each emptyDir of a dependency install: /out (the installed packages) and
// /work (pip's downloads, npm's cache, the push step's spool of the layer).
var depsScratch = resource.MustParse("2Gi")

// depsEphemeral is a deps container's ephemeral-storage limit. The kubelet evicts a pod whose
// emptyDirs, logs and writable layers pass the sum of its containers' limits (the largest init
// container's, if more), so one container's limit holds both volumes, /tmp and the logs.
var depsEphemeral = resource.MustParse("5Gi")

// dockerConfigDir is where a deps Job's push container finds its registry credential.
const dockerConfigDir = "/etc/sless/docker"

// DepsPushSecret is the Secret a deps Job's push container reads its credential from; owned by
// the Job, so it goes with it.
func DepsPushSecret(job *batchv1.Job, name string, dockerConfigJSON []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, Labels: job.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON},
	}
}

// MakeDepsJob is the Job of a dependency install (role=deps: the NetworkPolicy lets these pods
// reach the package index and the registry).
func MakeDepsJob(d DepsJob) (*batchv1.Job, *corev1.ConfigMap) {
	backoff := int32(0)
	deadline := int64(900)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: Labels(d.Function, runspec.RoleDeps)}, Data: d.Manifests}
	// Temp files go to /work, not /tmp: pip unpacks a whole install there and the push step
	// spools the layer, both far beyond the 64 MiB /tmp of a restricted pod.
	env := []corev1.EnvVar{{Name: "TMPDIR", Value: "/work"}}
	if d.Proxy != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
			env = append(env, corev1.EnvVar{Name: k, Value: d.Proxy})
		}
		env = append(env, corev1.EnvVar{Name: "NO_PROXY", Value: ""}, corev1.EnvVar{Name: "no_proxy", Value: ""})
	}
	for _, kv := range d.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	// An install is bigger than a function: more memory and disk than the namespace's defaults.
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("100m"),
			corev1.ResourceEphemeralStorage: resource.MustParse("512Mi")},
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: depsEphemeral},
	}
	push := []string{"sless", "deps", "push", "--dir", "/out", "--to", d.PushTo, "--prefix", d.DepsDir}
	if d.Insecure {
		push = append(push, "--insecure")
	}
	out, work := corev1.VolumeMount{Name: "out", MountPath: "/out"}, corev1.VolumeMount{Name: "work", MountPath: "/work"}
	pod := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Volumes: []corev1.Volume{
			{Name: "in", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: d.Name}}}},
			{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrQuantity(depsScratch)}}},
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptrQuantity(depsScratch)}}},
			{Name: "registry-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: d.PushSecret,
				Items: []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}}}}},
		},
		// The installer's last log lines become its termination message: the Function's status
		// shows why an install failed without anyone reading pod logs.
		InitContainers: []corev1.Container{{Name: "install", Image: d.RuntimeImage, Command: d.Argv, Env: env, WorkingDir: "/work", Resources: res,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			VolumeMounts:             []corev1.VolumeMount{{Name: "in", MountPath: "/in", ReadOnly: true}, out, work}}},
		Containers: []corev1.Container{{Name: "push", Image: d.OperatorImage, Command: push, Resources: res,
			Env:                      []corev1.EnvVar{{Name: "DOCKER_CONFIG", Value: dockerConfigDir}, {Name: "TMPDIR", Value: "/work"}},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			VolumeMounts:             []corev1.VolumeMount{out, work, {Name: "registry-auth", MountPath: dockerConfigDir, ReadOnly: true}}}},
	}
	restrictedPod(&pod)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: Labels(d.Function, runspec.RoleDeps)},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, ActiveDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: Labels(d.Function, runspec.RoleDeps)}, Spec: pod}},
	}
	return job, cm
}

func ptrIntStr(v intstr.IntOrString) *intstr.IntOrString { return &v }

func ptrQuantity(q resource.Quantity) *resource.Quantity { return &q }
