package resources

import (
	"net/netip"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sless-dev/sless/api/apiv1"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/runspec"
)

// A namespace with enabled rabbitmq triggers gets a consumer: one Deployment (one pod) of the
// operator image running `sless-operator --role=consumer` for that namespace, under its own
// ServiceAccount whose Role reads the namespace's Triggers and writes their status and nothing
// else, a NetworkPolicy that adds to the namespace's egress (DNS, the tenant's egress rule, which
// applies to the broker connection as to functions) the API's pods and the Kubernetes API, and
// the Secret holding the namespace's event token (apiv1.EventToken). Every object is named
// ConsumerName.

// ConsumerName names the namespace's consumer objects. It has a dot, so no function's objects
// (named after the function: a DNS label) can have it.
const ConsumerName = "sless.consumer"

// Paths in the consumer's container: the tenant secrets its triggers name, as
// <ConsumerSecretsDir>/<secret>/<key> (a projected volume, each secret optional: a missing one is
// that trigger's status, not a pod that cannot start), and the event token.
const (
	ConsumerSecretsDir = "/etc/sless/secrets"
	ConsumerTokenDir   = "/etc/sless/event"
	ConsumerTokenKey   = "token"
)

// ConsumerConfig is what every namespace's consumer gets.
type ConsumerConfig struct {
	// Image is the operator's image (by digest), run with --role=consumer.
	Image string
	// OperatorNamespace holds the API's pods (label app.kubernetes.io/name=sless-api), reached
	// on APIPort through the Service at APIURL.
	OperatorNamespace string
	APIURL            string
	APIPort           int32
	// KubeAPI are the Kubernetes API server's endpoints (the kubernetes Service's), which the
	// consumer reaches to watch its Triggers and write their status.
	KubeAPI []netip.AddrPort
	// PolicyGate is the image whose `sless policy-wait` starts the pod (as PolicyGate does tenant
	// code's), "" for none: the broker is the tenant's choice, so nothing is dialled before the
	// namespace's egress policy is in force. It probes the node's kubelet (status.hostIP:10250),
	// which the consumer's policies deny (the usual probe, the Kubernetes API, is one they allow).
	PolicyGate string
}

// KubeletPort is what the consumer's policy gate probes on its node.
const KubeletPort = "10250"

// ConsumerLabels are the consumer pod's labels: the namespace's egress policy sless-egress
// selects it (every pod but dependency installs').
func ConsumerLabels() map[string]string {
	return map[string]string{runspec.LabelManagedBy: runspec.ManagedBy, runspec.LabelRole: string(runspec.RoleConsumer)}
}

// ConsumedTriggers are the triggers of the list a consumer runs: enabled rabbitmq ones, by name.
func ConsumedTriggers(ts []slessv1.Trigger) []slessv1.Trigger {
	var out []slessv1.Trigger
	for _, t := range ts {
		if t.Spec.Type == apiv1.TriggerRabbitMQ && t.Spec.RabbitMQ != nil && (t.Spec.Enabled == nil || *t.Spec.Enabled) && t.DeletionTimestamp.IsZero() {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func consumerMeta(ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: ConsumerName, Namespace: ns, Labels: ConsumerLabels()}
}

// MakeConsumerDeployment is namespace ns's consumer for triggers (ConsumedTriggers): one pod,
// replaced (not rolled: two consumers would write one trigger's status at once) when the secrets
// it mounts change; a trigger added or removed with the same secrets changes nothing here (the
// consumer watches the namespace's Triggers).
func MakeConsumerDeployment(ns string, triggers []slessv1.Trigger, c ConsumerConfig) *appsv1.Deployment {
	keys := map[string][]string{} // secret → keys
	for _, t := range triggers {
		secret, key, err := apiv1.SplitSecretRef(t.Spec.RabbitMQ.URLSecret)
		if err != nil || slices.Contains(keys[secret], key) {
			continue
		}
		keys[secret] = append(keys[secret], key)
	}
	names := make([]string, 0, len(keys))
	for s := range keys {
		names = append(names, s)
	}
	sort.Strings(names)
	yes, mode := true, int32(0o444)
	var sources []corev1.VolumeProjection
	for _, s := range names {
		sort.Strings(keys[s])
		var items []corev1.KeyToPath
		for _, k := range keys[s] {
			items = append(items, corev1.KeyToPath{Key: k, Path: s + "/" + k})
		}
		sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: SecretName(s)}, Items: items, Optional: &yes}})
	}
	grace := int64(30)
	pod := corev1.PodSpec{
		ServiceAccountName:            ConsumerName,
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name:  "consumer",
			Image: c.Image,
			Args: []string{"--role=consumer", "--namespace=" + ns, "--api-url=" + c.APIURL,
				"--consumer-secrets-dir=" + ConsumerSecretsDir, "--event-token-file=" + ConsumerTokenDir + "/" + ConsumerTokenKey},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("25m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			VolumeMounts:             []corev1.VolumeMount{{Name: "event-token", MountPath: ConsumerTokenDir, ReadOnly: true}},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		}},
		Volumes: []corev1.Volume{{Name: "event-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: ConsumerName, DefaultMode: &mode}}}},
	}
	if len(sources) > 0 {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "secrets", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: sources, DefaultMode: &mode}}})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "secrets", MountPath: ConsumerSecretsDir, ReadOnly: true})
	}
	restrictedPod(&pod)
	if c.PolicyGate != "" {
		PolicyGate(&pod, c.PolicyGate)
		gate := &pod.InitContainers[0]
		gate.Command = append(gate.Command, "--denied=$(SLESS_HOST_IP):"+KubeletPort)
		gate.Env = append(gate.Env, corev1.EnvVar{Name: "SLESS_HOST_IP", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}})
	}
	// It watches its Triggers and writes their status (ConsumerRole): the one pod of sless's in a
	// tenant namespace with a token.
	pod.AutomountServiceAccountToken = &yes
	replicas := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: consumerMeta(ns),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: ConsumerLabels()},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: ConsumerLabels()}, Spec: pod},
		},
	}
}

// MakeConsumerSecret holds the namespace's event token (apiv1.EventToken of the install's key).
func MakeConsumerSecret(ns, token string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: consumerMeta(ns), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{ConsumerTokenKey: []byte(token)}}
}

// MakeConsumerServiceAccount is the consumer's account.
func MakeConsumerServiceAccount(ns string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: consumerMeta(ns)}
}

// ConsumerRules are all the consumer may do: read its namespace's Triggers and write their status.
// No Secret (the kubelet mounts the ones it needs), no other kind.
func ConsumerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{slessv1.GroupVersion.Group}, Resources: []string{"triggers"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{slessv1.GroupVersion.Group}, Resources: []string{"triggers/status"}, Verbs: []string{"update", "patch"}},
	}
}

// MakeConsumerRole and MakeConsumerRoleBinding give the consumer's account ConsumerRules in its
// namespace.
func MakeConsumerRole(ns string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: consumerMeta(ns), Rules: ConsumerRules()}
}

func MakeConsumerRoleBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: consumerMeta(ns),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ConsumerName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ConsumerName, Namespace: ns}}}
}

// MakeConsumerNetworkPolicy adds to the consumer pod's egress what the platform's own code needs:
// the API's pods (/fn/) and the Kubernetes API. The broker is reached under the namespace's own
// egress rule (sless-egress), as a function would reach it.
func MakeConsumerNetworkPolicy(ns string, c ConsumerConfig) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	rules := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.OperatorNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "sless-api"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrIntStr(intstr.FromInt32(c.APIPort))}},
	}}
	for _, ap := range c.KubeAPI {
		bits := 32
		if ap.Addr().Is6() {
			bits = 128
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(ap.Addr(), bits).String()}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrIntStr(intstr.FromInt32(int32(ap.Port())))}},
		})
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: consumerMeta(ns), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: ConsumerLabels()},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      rules,
	}}
}

// ConsumerSecrets are the tenant secrets a consumer Deployment mounts, sorted: what a test or an
// event names.
func ConsumerSecrets(d *appsv1.Deployment) []string {
	var out []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.Secret != nil {
				out = append(out, strings.TrimPrefix(s.Secret.Name, SecretPrefix))
			}
		}
	}
	sort.Strings(out)
	return out
}
