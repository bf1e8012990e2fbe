package resources

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sless-dev/sless/api/apiv1"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/runspec"
)

// TenantConfig is what every tenant namespace gets.
type TenantConfig struct {
	// OperatorNamespace may reach function pods (the /fn/ proxy runs there).
	OperatorNamespace string
	// DockerConfigJSON is the namespace's registry pull secret (.dockerconfigjson): with sless's
	// registry a pull-only credential for the namespace's own repositories (regauth.TenantPull).
	DockerConfigJSON func(ns string) []byte
	// DepsEgress are what deps pods may reach besides DNS and the index proxy: the registry (their
	// push step pushes the layer), as CIDR or CIDR:PORT (TCP).
	DepsEgress []string
	// IndexProxyPort is the port of the index proxy (IndexProxyService) on the operator's pods,
	// which deps pods may reach; 0 for none.
	IndexProxyPort int32
	// Quota is what the namespace may use at once; zero fields take DefaultTenantQuota's.
	Quota TenantQuota
	// Egress is what tenant code may reach beyond the cluster DNS (the NetworkPolicy sless-egress).
	Egress TenantEgress
	// EgressChoice is the namespace's own rule (EgressChoice of the Namespace), nil for none: set
	// per namespace by whoever provisions it.
	EgressChoice *apiv1.EgressRule
}

// TenantQuota bounds one tenant namespace: its ResourceQuota and the LimitRange that gives every
// container the requests and limits the quota counts.
type TenantQuota struct {
	// CPU bounds the sum of the CPU limits (and of the requests) of the namespace's pods.
	CPU resource.Quantity
	// Memory bounds the sum of their memory limits.
	Memory resource.Quantity
	// EphemeralStorage bounds the sum of their local-disk requests and limits (emptyDirs,
	// container logs and writable layers).
	EphemeralStorage resource.Quantity
	// Pods bounds the pods (function instances, job, cron and dependency-install runs).
	Pods int64
	// Functions bounds the Function objects (count/functions.sless.dev).
	Functions int64
	// ContainerCPU is the CPU limit of a container that sets none, and the most one may set.
	ContainerCPU resource.Quantity
}

// DefaultTenantQuota fits a small cluster. Quotas bound limits, which may overcommit the nodes;
// the requests that the scheduler reserves stay small (25m CPU, 64Mi disk per container).
//   - 16 CPUs of limits: 16 pods at the default of 1 CPU per container (one core is what a
//     single-threaded runtime can use; less slows its start);
//   - 8Gi of memory limits: 64 instances at the default 128 MiB;
//   - 20Gi of ephemeral storage: 50 pods at the default 256Mi, or a dependency install (5Gi)
//     beside 50 instances;
//   - 50 pods and 100 functions (most scaled to zero at any time).
var DefaultTenantQuota = TenantQuota{
	CPU:              resource.MustParse("16"),
	Memory:           resource.MustParse("8Gi"),
	EphemeralStorage: resource.MustParse("20Gi"),
	Pods:             50,
	Functions:        100,
	ContainerCPU:     resource.MustParse("1"),
}

// withDefaults fills q's zero fields from DefaultTenantQuota.
func (q TenantQuota) withDefaults() TenantQuota {
	d := DefaultTenantQuota
	for _, f := range []struct{ v, def *resource.Quantity }{{&q.CPU, &d.CPU}, {&q.Memory, &d.Memory},
		{&q.EphemeralStorage, &d.EphemeralStorage}, {&q.ContainerCPU, &d.ContainerCPU}} {
		if f.v.IsZero() {
			*f.v = f.def.DeepCopy()
		}
	}
	if q.Pods == 0 {
		q.Pods = d.Pods
	}
	if q.Functions == 0 {
		q.Functions = d.Functions
	}
	return q
}

// QuotaFunctions is the ResourceQuota's name for the count of Function objects.
var QuotaFunctions = corev1.ResourceName("count/functions." + slessv1.GroupVersion.Group)

// Per-container defaults of the LimitRange: what a container that sets nothing gets.
var (
	// DefaultMemory is the memory request and limit (a function sets its own from memoryMB).
	DefaultMemory = resource.MustParse("128Mi")
	// DefaultCPURequest is what the scheduler reserves per container.
	DefaultCPURequest = resource.MustParse("25m")
	// DefaultEphemeralRequest and DefaultEphemeralLimit cover a function's logs and its 64Mi /tmp.
	DefaultEphemeralRequest = resource.MustParse("64Mi")
	DefaultEphemeralLimit   = resource.MustParse("256Mi")
	// MaxMemory is the most one container may have (a function's memoryMB is at most 8192).
	MaxMemory = resource.MustParse("8Gi")
	// MaxEphemeral is the most one container may have: a dependency install's (depsEphemeral).
	MaxEphemeral = depsEphemeral
)

// TenantObjects are the objects of a tenant namespace: the namespace with pod-security
// "restricted" enforced, a LimitRange, a ResourceQuota, NetworkPolicies (ingress only from the
// operator's namespace; egress DNS, the namespace's egress rule for all but role=deps pods —
// sless-egress — and the index and registry for role=deps pods) and the registry pull secret
// every pod references.
func TenantObjects(ns string, c TenantConfig) (*corev1.Namespace, []any) {
	labels := map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
		runspec.LabelManagedBy:               runspec.ManagedBy,
	}
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{runspec.LabelManagedBy: runspec.ManagedBy}}
	}
	q := c.Quota.withDefaults()
	quota := &corev1.ResourceQuota{ObjectMeta: meta("sless-quota"), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		corev1.ResourceLimitsCPU:                q.CPU,
		corev1.ResourceRequestsCPU:              q.CPU,
		corev1.ResourceLimitsMemory:             q.Memory,
		corev1.ResourceRequestsEphemeralStorage: q.EphemeralStorage,
		corev1.ResourceLimitsEphemeralStorage:   q.EphemeralStorage,
		corev1.ResourcePods:                     *resource.NewQuantity(q.Pods, resource.DecimalSI),
		QuotaFunctions:                          *resource.NewQuantity(q.Functions, resource.DecimalSI),
	}}}
	// Every key of Max has a Default and every Default a DefaultRequest: the API server would
	// fill in the missing ones, and Ensure would then see a difference on every call.
	limits := &corev1.LimitRange{ObjectMeta: meta("sless-limits"), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer,
		Default: corev1.ResourceList{corev1.ResourceMemory: DefaultMemory, corev1.ResourceCPU: q.ContainerCPU,
			corev1.ResourceEphemeralStorage: DefaultEphemeralLimit},
		DefaultRequest: corev1.ResourceList{corev1.ResourceMemory: DefaultMemory, corev1.ResourceCPU: DefaultCPURequest,
			corev1.ResourceEphemeralStorage: DefaultEphemeralRequest},
		Max: corev1.ResourceList{corev1.ResourceMemory: MaxMemory, corev1.ResourceCPU: q.ContainerCPU,
			corev1.ResourceEphemeralStorage: MaxEphemeral},
	}}}}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	// DNS to the cluster's DNS pods only: port 53 anywhere would be a way out (a resolver of the
	// tenant's own, or DNS tunnelling through one).
	dns := networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: &udp, Port: ptrIntStr(intstr.FromInt32(53))}, {Protocol: &tcp, Port: ptrIntStr(intstr.FromInt32(53))}}}
	defaultPolicy := &networkingv1.NetworkPolicy{ObjectMeta: meta("sless-default"), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.OperatorNamespace}}}}}},
		Egress: []networkingv1.NetworkPolicyEgressRule{dns},
	}}
	// A rule with no peers would allow every destination: without CIDRs, deps pods get DNS only.
	var depsEgress []networkingv1.NetworkPolicyEgressRule
	for _, e := range c.DepsEgress {
		cidr, port := splitEgress(e)
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}
		if port != 0 {
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrIntStr(intstr.FromInt32(port))}}
		}
		depsEgress = append(depsEgress, rule)
	}
	// The package indexes only through the index proxy, which holds their credentials.
	if c.IndexProxyPort != 0 {
		depsEgress = append(depsEgress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.OperatorNamespace}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrIntStr(intstr.FromInt32(c.IndexProxyPort))}}})
	}
	depsPolicy := &networkingv1.NetworkPolicy{ObjectMeta: meta("sless-deps-egress"), Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{runspec.LabelRole: string(runspec.RoleDeps)}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      depsEgress,
	}}
	secret := &corev1.Secret{ObjectMeta: meta(PullSecret), Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: c.pullSecret(ns)}}
	// The LimitRange before the quota: a pod admitted under the new quota gets the new defaults.
	return namespace, []any{limits, quota, defaultPolicy, egressPolicy(ns, c, meta("sless-egress")), depsPolicy, secret}
}

func (c TenantConfig) pullSecret(ns string) []byte {
	if c.DockerConfigJSON == nil {
		return []byte(`{"auths":{}}`)
	}
	return c.DockerConfigJSON(ns)
}

// splitEgress reads "10.0.0.0/8" or "10.88.0.1/32:5000".
func splitEgress(e string) (cidr string, port int32) {
	i := strings.LastIndex(e, ":")
	if i < 0 || !strings.Contains(e[:i], "/") {
		return e, 0
	}
	n, err := strconv.ParseInt(e[i+1:], 10, 32)
	if err != nil {
		return e, 0
	}
	return e[:i], int32(n)
}

// AnnotationProvisioned on a tenant namespace is set by the controller's TenantReconciler once the
// tenant's objects are as TenantObjects says (its value is their digest): the API's ensure answers
// when it is there.
const AnnotationProvisioned = "sless.dev/tenant-provisioned"
