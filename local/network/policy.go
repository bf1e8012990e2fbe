package network

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
)

// Policy is what the chain lets tenant containers reach besides "the outside" (and what caps
// them). The zero Policy allows nothing more and uses the default caps.
type Policy struct {
	// ProxyPort is the index proxy's port on the deps gateway: the one host service installs
	// may reach (0: none).
	ProxyPort int
	// Allow are the admin's exceptions to the denied ranges (--egress-allow), for functions,
	// jobs and cron runs; installs never get them.
	Allow []Allow
	// None keeps functions, jobs and cron runs from the outside: they reach DNS and Allow only
	// (--egress-default=none).
	None bool
	// Namespaces are the rules of the namespaces whose rule is not the default (None, Allow):
	// their containers (Register) get it instead.
	Namespaces map[string]NamespaceRule
	// Nameservers are resolvers port 53 of which is allowed; HostResolvers adds the ones podman
	// gives containers (HostNameservers, read again at every check), or a LAN or cloud resolver
	// (10.0.0.2, 192.168.1.1) would leave functions without DNS.
	Nameservers   []netip.Addr
	HostResolvers bool
	// ConnRate is how many new connections per second one container may open (burst twice
	// that); ConnMax how many it may have tracked at once. Zero: the defaults.
	ConnRate, ConnMax int
}

// Default caps: far above what a function's outbound calls need, far below what fills the
// host's conntrack table (262144 entries here) from one container.
const (
	DefaultConnRate = 200
	DefaultConnMax  = 1024
)

// Allow is one allowed destination (--egress-allow, a namespace's rule): a range and a port (TCP
// and UDP); Port 0 is any. Parsed by apiv1.ParseEgressAllow.
type Allow = apiv1.EgressAllow

// Denied are the IPv4 destinations that are not "the outside" (apiv1.NeverOutside: private,
// shared, link-local and loopback ranges, multicast and reserved space, the metadata addresses
// outside 169.254/16). A Kubernetes ClusterIP or pod network, a LAN database, another bridge's
// containers: all fall in one of these.
var Denied = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range apiv1.NeverOutside {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}()

// HostNameservers are the IPv4 resolvers podman gives containers: /etc/resolv.conf's, or, where
// that names only a local stub (systemd-resolved's 127.0.0.53), the upstream servers in
// /run/systemd/resolve/resolv.conf, as podman does.
func HostNameservers() []netip.Addr {
	if ns := nameservers("/etc/resolv.conf"); len(ns) > 0 {
		return ns
	}
	return nameservers("/run/systemd/resolve/resolv.conf")
}

func nameservers(resolvConf string) []netip.Addr {
	f, err := os.Open(resolvConf)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil && a.Is4() && !a.IsLoopback() {
				out = append(out, a)
			}
		}
	}
	return out
}

// bridgeSubnets are the IPv4 subnets on the host's other Linux bridges (podman's, docker's, a
// Kubernetes node's cni0, a VM bridge, another sless instance's): their containers are not "the
// outside" even where the range is public, nor where --egress-allow opens the private range
// they are in.
func bridgeSubnets(own ...string) []netip.Prefix {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil
	}
	var bridges []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("/sys/class/net", e.Name(), "bridge")); err == nil && !contains(own, e.Name()) {
			bridges = append(bridges, e.Name())
		}
	}
	var out []netip.Prefix
	for _, b := range bridges {
		for _, p := range interfacePrefixes(b) {
			if !contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// interfacePrefixes are the IPv4 subnets of the interface's addresses.
func interfacePrefixes(name string) []netip.Prefix {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() {
				ones, _ := ipn.Mask.Size()
				out = append(out, netip.PrefixFrom(ip.Unmap(), ones).Masked())
			}
		}
	}
	return out
}
