package resources

import (
	"encoding/json"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

// TenantEgress is what tenant code (functions, jobs and cron runs; dependency installs keep
// sless-deps-egress) may reach outside the cluster's DNS.
type TenantEgress struct {
	// Cluster are the cluster's pod, service and node ranges (sless-operator --cluster-cidr) and
	// Deny further addresses of the platform outside them (--egress-deny: an S3 endpoint, a
	// database, a load balancer in front of the API). Mode "internet" needs Cluster: it cannot be
	// guessed, and without it tenant code keeps the cluster's DNS only (EgressNoteDNSOnly).
	Cluster, Deny []netip.Prefix
	// Install is the default mode and the destinations beyond it.
	Install runspec.EgressInstall
}

// Enforceable reports whether mode "internet" can be enforced: the install named the cluster's
// ranges.
func (e TenantEgress) Enforceable() bool { return len(e.Cluster) > 0 }

// AnnotationEgress on a tenant Namespace is the namespace owner's egress rule (apiv1.EgressRule as
// JSON), written by the API (PUT …/egress); the TenantReconciler renders it within what the install
// permits. AnnotationEgressNote on the sless-egress NetworkPolicy says what holds instead of the
// rule where it differs.
const (
	AnnotationEgress     = "sless.dev/egress"
	AnnotationEgressNote = "sless.dev/egress-note"
)

// EgressNoteDNSOnly is the note of an install that names no cluster ranges.
const EgressNoteDNSOnly = "mode internet is not enforced: this install names no cluster ranges (sless-operator --cluster-cidr), so tenant code reaches only the cluster DNS and the allowed destinations"

// EgressChoice reads a namespace's AnnotationEgress; nil when there is none. A value that does not
// read is the narrowest rule (mode none, nothing allowed), never the widest.
func EgressChoice(ns *corev1.Namespace) *apiv1.EgressRule {
	v, ok := ns.Annotations[AnnotationEgress]
	if !ok {
		return nil
	}
	var r apiv1.EgressRule
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return &apiv1.EgressRule{Mode: apiv1.EgressNone}
	}
	return &r
}

// AlwaysDenied are never "the outside" (apiv1.NeverOutside), whatever the install says.
var AlwaysDenied = apiv1.NeverOutside

// egressPolicy is sless-egress: what pods other than dependency installs reach beyond
// sless-default's DNS, by the namespace's effective rule.
func egressPolicy(ns string, c TenantConfig, meta metav1.ObjectMeta) *networkingv1.NetworkPolicy {
	e := c.Egress
	mode, allow := e.Install.Effective(ns, c.EgressChoice)
	var rules []networkingv1.NetworkPolicyEgressRule
	if mode == apiv1.EgressInternet && e.Enforceable() {
		var peers []networkingv1.NetworkPolicyPeer
		for _, all := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
			if all.Addr().Is6() && !slices.ContainsFunc(e.Cluster, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
				continue // a cluster without IPv6 gives pods none
			}
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: all.String(),
				Except: excepts(all, slices.Concat(AlwaysDenied, e.Cluster, e.Deny))}})
		}
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: peers})
	} else if mode == apiv1.EgressInternet {
		meta.Annotations = map[string]string{AnnotationEgressNote: EgressNoteDNSOnly}
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	for _, a := range allow {
		// Never a rule without peers: it would allow every destination.
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: a.Prefix.String()}}}}
		if a.Port != 0 {
			port := intstr.FromInt32(int32(a.Port))
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}, {Protocol: &udp, Port: ptrIntStr(port)}}
		}
		rules = append(rules, rule)
	}
	return &networkingv1.NetworkPolicy{ObjectMeta: meta, Spec: networkingv1.NetworkPolicySpec{
		// Every pod but dependency installs' (their rule is sless-deps-egress's alone). No rule at
		// all is no egress beyond sless-default's DNS.
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: runspec.LabelRole, Operator: metav1.LabelSelectorOpNotIn, Values: []string{string(runspec.RoleDeps)}}}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      rules,
	}}
}

// excepts are the ranges of denied within all, without those another one covers, sorted.
func excepts(all netip.Prefix, denied []netip.Prefix) []string {
	var in []netip.Prefix
	for _, d := range denied {
		d = d.Masked()
		if d.Addr().Is4() == all.Addr().Is4() && !d.Addr().Is4In6() || d.Addr().Is4In6() && all.Addr().Is6() {
			in = append(in, d)
		}
	}
	var out []string
	for i, d := range in {
		covered := slices.ContainsFunc(in, func(o netip.Prefix) bool {
			return o != d && o.Bits() <= d.Bits() && o.Contains(d.Addr())
		}) || slices.Index(in, d) < i // a duplicate
		if !covered {
			out = append(out, d.String())
		}
	}
	slices.Sort(out)
	return out
}
