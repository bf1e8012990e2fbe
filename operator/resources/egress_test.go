package resources_test

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

func egressPolicyOf(t *testing.T, c resources.TenantConfig) *networkingv1.NetworkPolicy {
	t.Helper()
	_, objs := resources.TenantObjects("sless-00000000000000ee", c)
	for _, o := range objs {
		if p, ok := o.(*networkingv1.NetworkPolicy); ok && p.Name == "sless-egress" {
			return p
		}
	}
	t.Fatal("no sless-egress NetworkPolicy")
	return nil
}

func install(t *testing.T, def apiv1.EgressMode, allow ...string) runspec.EgressInstall {
	t.Helper()
	e := runspec.EgressInstall{Default: def}
	for _, a := range allow {
		if err := e.AddAllow(a); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func TestEgressPolicy(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16"), netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("198.51.100.0/24")}
	ns := "sless-00000000000000ee"
	for _, tc := range []struct {
		name   string
		egress resources.TenantEgress
		choice *apiv1.EgressRule
		// want: the rules' peers and ports, as "CIDR except… ports…" strings.
		want []string
		note bool
	}{
		{name: "no cluster ranges: nothing beyond DNS, and a note", egress: resources.TenantEgress{Install: install(t, "")}, note: true},
		{name: "no cluster ranges keeps the admin's allows", egress: resources.TenantEgress{Install: install(t, "", ns+"=10.0.5.7/32:5432")},
			want: []string{"10.0.5.7/32 TCP/5432 UDP/5432"}, note: true},
		{name: "internet, IPv4 cluster", egress: resources.TenantEgress{Cluster: cluster, Deny: []netip.Prefix{netip.MustParsePrefix("203.0.113.9/32")}, Install: install(t, "")},
			want: []string{"0.0.0.0/0 except [0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 168.63.129.16/32 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.168.0.0/16 198.51.100.0/24 203.0.113.9/32 224.0.0.0/4 240.0.0.0/4]"}},
		{name: "internet, dual stack", egress: resources.TenantEgress{Cluster: append(slices.Clone(cluster), netip.MustParsePrefix("2001:db8:42::/56")), Install: install(t, "")},
			want: []string{"0.0.0.0/0 except [0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 168.63.129.16/32 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.168.0.0/16 198.51.100.0/24 224.0.0.0/4 240.0.0.0/4] ::/0 except [2001:db8:42::/56 64:ff9b::/96 ::/128 ::1/128 ::ffff:0.0.0.0/96 fc00::/7 fe80::/10 ff00::/8]"}},
		{name: "install default none", egress: resources.TenantEgress{Cluster: cluster, Install: install(t, apiv1.EgressNone, "10.0.5.7/32:5432")},
			want: []string{"10.0.5.7/32 TCP/5432 UDP/5432"}},
		{name: "another namespace's allow is not this one's", egress: resources.TenantEgress{Cluster: cluster, Install: install(t, apiv1.EgressNone, "sless-00000000000000ff=10.0.5.7/32:5432")}},
		{name: "the namespace narrowed to none and one allow", egress: resources.TenantEgress{Cluster: cluster, Install: install(t, "", "10.0.5.0/24:5432", "10.0.6.0/24:*")},
			choice: &apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.0.6.8/32:80"}},
			want:   []string{"10.0.6.8/32 TCP/80 UDP/80"}},
		{name: "a choice wider than the install now is narrowed to it", egress: resources.TenantEgress{Cluster: cluster, Install: install(t, apiv1.EgressNone, "10.0.5.0/24:5432")},
			choice: &apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{"10.0.5.7/32:5432", "10.0.6.8/32:80"}},
			want:   []string{"10.0.5.7/32 TCP/5432 UDP/5432"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := egressPolicyOf(t, resources.TenantConfig{OperatorNamespace: "sless-system", Egress: tc.egress, EgressChoice: tc.choice})
			if p.Spec.PodSelector.MatchExpressions[0].Key != runspec.LabelRole || p.Spec.PodSelector.MatchExpressions[0].Values[0] != string(runspec.RoleDeps) {
				t.Errorf("selector %+v: dependency installs must not get it", p.Spec.PodSelector)
			}
			var got []string
			for _, r := range p.Spec.Egress {
				if len(r.To) == 0 {
					t.Fatalf("a rule without peers allows everything: %+v", r)
				}
				s := ""
				for i, peer := range r.To {
					if i > 0 {
						s += " "
					}
					s += peer.IPBlock.CIDR
					if len(peer.IPBlock.Except) > 0 {
						s += " except " + fmtList(peer.IPBlock.Except)
					}
				}
				for _, port := range r.Ports {
					s += " " + string(*port.Protocol) + "/" + port.Port.String()
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rules\n%q\nwant\n%q", got, tc.want)
			}
			if note := p.Annotations[resources.AnnotationEgressNote] != ""; note != tc.note {
				t.Errorf("note %q, want one: %v", p.Annotations[resources.AnnotationEgressNote], tc.note)
			}
		})
	}
}

func fmtList(l []string) string {
	s := "["
	for i, v := range l {
		if i > 0 {
			s += " "
		}
		s += v
	}
	return s + "]"
}
