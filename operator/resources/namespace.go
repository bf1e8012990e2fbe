package resources

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	// Quota bounds the namespace: total memory limits and pods.
	MemoryQuota string // e.g. "8Gi"
	PodQuota    int64
}

// TenantObjects are the objects of a tenant namespace: the namespace with pod-security
// "restricted" enforced, a ResourceQuota, a LimitRange, NetworkPolicies (ingress only from the
// operator's namespace; egress only DNS, plus the index and registry for role=deps pods) and the
// registry pull secret every pod references.
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
	mem := c.MemoryQuota
	if mem == "" {
		mem = "8Gi"
	}
	pods := c.PodQuota
	if pods == 0 {
		pods = 50
	}
	quota := &corev1.ResourceQuota{ObjectMeta: meta("sless-quota"), Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		corev1.ResourceLimitsMemory: resource.MustParse(mem),
		corev1.ResourcePods:         *resource.NewQuantity(pods, resource.DecimalSI),
	}}}
	limits := &corev1.LimitRange{ObjectMeta: meta("sless-limits"), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		Default:        corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		DefaultRequest: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("25m")},
		Max:            corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
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
	return namespace, []any{quota, limits, defaultPolicy, depsPolicy, secret}
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
