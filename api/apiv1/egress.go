package apiv1

import (
	"cmp"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// EgressMode is what a namespace's functions, jobs and cron runs reach besides its allowed
// destinations: the outside (everything but the platform, the cluster and private, link-local and
// metadata ranges) or nothing.
type EgressMode string

// Egress modes.
const (
	EgressInternet EgressMode = "internet"
	EgressNone     EgressMode = "none"
)

// MaxEgressAllow bounds a namespace's allow list.
const MaxEgressAllow = 64

// EgressRule is a namespace's outbound rule: the mode and the destinations beyond it, each
// "CIDR:PORT" (TCP and UDP), "CIDR:*" or a bare CIDR (any port).
type EgressRule struct {
	Mode  EgressMode `json:"mode"`
	Allow []string   `json:"allow"`
}

// Egress answers GET and PUT /v1/namespaces/{ns}/egress; PUT's body is its EgressRule (the other
// fields are the platform's and ignored there).
type Egress struct {
	EgressRule
	// Install is the most the namespace may have: the install's default mode and the
	// destinations it allows this namespace. A PUT may narrow it, never widen it.
	Install EgressRule `json:"install"`
	// Note says what holds instead where the platform enforces something other than the rule
	// (an install that names no cluster ranges keeps functions to the cluster's DNS).
	Note string `json:"note,omitempty"`
}

// EgressAllow is one allowed destination: a range and a port (0: any).
type EgressAllow struct {
	Prefix netip.Prefix
	Port   uint16
}

// String is the canonical form: "CIDR:PORT", or the bare CIDR for any port.
func (a EgressAllow) String() string {
	if a.Port == 0 {
		return a.Prefix.String()
	}
	return a.Prefix.String() + ":" + strconv.Itoa(int(a.Port))
}

// Covers reports whether every destination of b is one of a's.
func (a EgressAllow) Covers(b EgressAllow) bool {
	return a.Prefix.Addr().BitLen() == b.Prefix.Addr().BitLen() && a.Prefix.Bits() <= b.Prefix.Bits() &&
		a.Prefix.Contains(b.Prefix.Addr()) && (a.Port == 0 || a.Port == b.Port)
}

// ParseEgressAllow reads "CIDR:PORT" ("10.0.5.7/32:5432", "2001:db8::/64:443"), "CIDR:*" or a bare
// CIDR; host bits are cleared. The error is an invalid_argument *Error naming s.
func ParseEgressAllow(s string) (EgressAllow, error) {
	cidr, port := s, ""
	// The port follows the last colon after the slash (IPv6 ranges have colons of their own).
	if slash := strings.IndexByte(s, '/'); slash >= 0 {
		if i := strings.LastIndexByte(s[slash:], ':'); i >= 0 {
			cidr, port = s[:slash+i], s[slash+i+1:]
		}
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return EgressAllow{}, invalid("egress allow %q: want CIDR:PORT (10.0.5.7/32:5432), CIDR:* or a CIDR", s)
	}
	a := EgressAllow{Prefix: p.Masked()}
	if a.Prefix.Addr().Is4In6() {
		return EgressAllow{}, invalid("egress allow %q: write an IPv4 range as IPv4", s)
	}
	if port != "" && port != "*" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return EgressAllow{}, invalid("egress allow %q: the port must be 1-65535 or *", s)
		}
		a.Port = uint16(n)
	}
	return a, nil
}

// ParseEgressRule checks r's mode and reads its allow list (at most MaxEgressAllow entries,
// duplicates dropped).
func ParseEgressRule(r EgressRule) (EgressMode, []EgressAllow, error) {
	if r.Mode != EgressInternet && r.Mode != EgressNone {
		return "", nil, invalid("egress mode %q: want %q or %q", r.Mode, EgressInternet, EgressNone)
	}
	if len(r.Allow) > MaxEgressAllow {
		return "", nil, invalid("egress allows at most %d destinations, not %d", MaxEgressAllow, len(r.Allow))
	}
	var out []EgressAllow
	seen := map[EgressAllow]bool{}
	for _, s := range r.Allow {
		a, err := ParseEgressAllow(s)
		if err != nil {
			return "", nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return r.Mode, out, nil
}

// NarrowerEgress checks that want asks for no more than permitted: mode "internet" only where
// permitted's is, and every destination inside one of permitted's. The error is an
// invalid_argument *Error naming the first entry that would widen it.
func NarrowerEgress(permitted, want EgressRule) error {
	pm, pa, err := ParseEgressRule(permitted)
	if err != nil {
		return fmt.Errorf("the install's egress rule: %w", err)
	}
	wm, _, err := ParseEgressRule(want)
	if err != nil {
		return err
	}
	if wm == EgressInternet && pm != EgressInternet {
		return invalid("egress mode %q widens what the install permits this namespace (mode %q): a namespace may only narrow it", wm, pm)
	}
	for _, s := range want.Allow {
		if w, _ := ParseEgressAllow(s); !coveredBy(pa, w) {
			return invalid("egress allow %q widens what the install permits this namespace (%s): a namespace may only narrow it",
				s, cmp.Or(strings.Join(permitted.Allow, ", "), "nothing beyond its mode"))
		}
	}
	return nil
}

func coveredBy(list []EgressAllow, a EgressAllow) bool {
	for _, p := range list {
		if p.Covers(a) {
			return true
		}
	}
	return false
}

// NeverOutside are never "the outside", whatever the install says: this host and link-local
// ranges, the cloud metadata addresses (169.254.169.254 and fd00:ec2::254 within them, Azure's
// wireserver, Alibaba's), the private and shared ranges (a LAN, a VPC's other hosts: an admin opens
// one with --egress-allow), multicast and reserved space, and IPv4 in IPv6 forms (mapped, NAT64).
var NeverOutside = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT; 100.100.100.200 (Alibaba's metadata)
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("168.63.129.16/32"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("::ffff:0:0/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("fc00::/7"), // unique local; fd00:ec2::254 (AWS's metadata)
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// Both backends deny them: the single host its IPv4 ones (its containers have no IPv6),
// Kubernetes all of them (operator/resources).
