package network

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sless-dev/sless/local/podman"
)

// DefaultPool is where an instance's /24 is picked from.
var DefaultPool = netip.MustParsePrefix("10.89.0.0/16")

// Net is one bridge network.
type Net struct {
	Name    string // podman's network name
	Bridge  string // the Linux bridge
	Subnet  netip.Prefix
	Gateway netip.Addr // the host's address on the bridge
}

// Networks are an instance's two networks and its firewall chain.
type Networks struct {
	// Functions carries function, job and cron containers; Deps dependency installs.
	Functions, Deps Net
	confDir         string
	chain           string
	subnet          netip.Prefix // both networks: the /24 the chain guards

	// OnRestore hears every part of the confinement Ensure found missing and put back.
	OnRestore func(Restored)

	amu      sync.Mutex // one check at a time
	confined bool       // Confine ran
	// forgetPending: the chains were (re)installed and the containers' connections not yet
	// forgotten.
	forgetPending bool
	policy        Policy
	members       map[string]Member // registered containers by name (egress.go)
	applied       [2][]string       // what iptables-save, ip6tables-save showed of the instance after the last switch
	wanted        [2]string         // what was rendered for it
	gmu           sync.Mutex
	pending       *flight // the next check, not yet started: callers of Ensure join it
}

// ConfDir is podman's network_config_dir for this instance (containers.conf [network]).
func ConfDir(dataDir string) string { return filepath.Join(dataDir, "cni") }

// Address is the address CNI's host-local IPAM gave container id (its full ID) on n, read from
// the IPAM's store (a file per address holding the container's ID): a directory read instead of a
// `podman inspect` (about 150 ms here) on a cold start's path. ok is false if none is recorded.
func (n *Networks) Address(net Net, id string) (addr netip.Addr, ok bool) {
	dir := filepath.Join(n.confDir, "ipam", net.Name)
	entries, err := os.ReadDir(dir)
	if err != nil || id == "" {
		return netip.Addr{}, false
	}
	for _, e := range entries {
		a, err := netip.ParseAddr(e.Name())
		if err != nil || !net.Subnet.Contains(a) {
			continue // last_reserved_ip.0, lock
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if owner, _, _ := strings.Cut(string(b), "\n"); strings.TrimSpace(owner) == id {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Plan names the instance's networks: the subnet recorded in dataDir by an earlier run, else the
// one asked for, else a free /24 of DefaultPool (starting at one derived from the instance, so
// two instances rarely try the same). Functions get its lower half, installs its upper half.
func Plan(instance, dataDir string, want netip.Prefix) (*Networks, error) {
	dir := ConfDir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	record := filepath.Join(dir, "subnet")
	var subnet netip.Prefix
	if b, err := os.ReadFile(record); err == nil {
		p, err := netip.ParsePrefix(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("network: %s: %w", record, err)
		}
		if want.IsValid() && want != p {
			return nil, fmt.Errorf("network: this data dir's containers use %s; remove them (sless down) before choosing %s", p, want)
		}
		subnet = p
	} else {
		used, err := usedPrefixes()
		if err != nil {
			return nil, err
		}
		if want.IsValid() {
			if want.Bits() != 24 || !want.Addr().Is4() {
				return nil, fmt.Errorf("network: the subnet must be an IPv4 /24, not %s", want)
			}
			if p, ok := overlaps(want.Masked(), used); ok {
				return nil, fmt.Errorf("network: %s overlaps %s, already routed on this machine", want, p)
			}
			subnet = want.Masked()
		} else if subnet, err = pick(instance, used); err != nil {
			return nil, err
		}
		if err := os.WriteFile(record, []byte(subnet.String()+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	a := subnet.Addr().As4()
	half := func(off byte) netip.Prefix { a[3] = off; return netip.PrefixFrom(netip.AddrFrom4(a), 25) }
	gw := func(p netip.Prefix) netip.Addr { return p.Addr().Next() }
	fn, dp := half(0), half(128)
	tag := instance[:min(10, len(instance))]
	return &Networks{
		Functions: Net{Name: "sless-" + instance, Bridge: "slf" + tag, Subnet: fn, Gateway: gw(fn)},
		Deps:      Net{Name: "sless-" + instance + "-deps", Bridge: "sld" + tag, Subnet: dp, Gateway: gw(dp)},
		confDir:   dir, chain: "SLESS-" + strings.ToUpper(instance[:min(12, len(instance))]), subnet: subnet,
	}, nil
}

// pick finds a free /24 in DefaultPool.
func pick(instance string, used []netip.Prefix) (netip.Prefix, error) {
	sum := sha256.Sum256([]byte(instance))
	base := DefaultPool.Addr().As4()
	for i := range 256 {
		a := base
		a[2] = sum[0] + byte(i)
		p := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		if _, ok := overlaps(p, used); !ok {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("network: no free /24 in %s; give one with --subnet", DefaultPool)
}

func overlaps(p netip.Prefix, used []netip.Prefix) (netip.Prefix, bool) {
	for _, u := range used {
		if u.Overlaps(p) {
			return u, true
		}
	}
	return netip.Prefix{}, false
}

// usedPrefixes are the machine's routes and addresses (the default route excluded).
func usedPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("network: ip route: %w", err)
	}
	for _, line := range strings.Split(string(routes), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if dst == "broadcast" || dst == "local" || dst == "unicast" {
			if len(f) < 2 {
				continue
			}
			dst = f[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil && p.Bits() > 0 {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// mac is the bridge's own address: locally administered, unique per gateway address.
func (n Net) mac() string {
	g := n.Gateway.As4()
	return fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", g[0], g[1], g[2], g[3])
}

// conflist is the CNI configuration podman reads for n (its CNI backend).
func (n Net) conflist(ipamDir string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       n.Name,
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": true, "hairpinMode": false,
				"ipam": map[string]any{"type": "host-local", "dataDir": ipamDir, "routes": []any{map[string]string{"dst": "0.0.0.0/0"}},
					"ranges": [][]map[string]string{{{"subnet": n.Subnet.String(), "gateway": n.Gateway.String()}}}}},
			// Accepts the networks' traffic where FORWARD's policy drops; the confinement is
			// decided earlier, in mangle PREROUTING (Confine).
			map[string]any{"type": "firewall"},
		},
	}, "", "  ")
}

// Create writes both networks' CNI configuration and brings their bridges up with the gateway
// addresses (before any container: the index proxy listens on the deps gateway), IPv6 off on
// them. It makes bridged traffic pass iptables and ip6tables (br_netfilter), without which
// containers on one bridge would reach each other.
func (n *Networks) Create(ctx context.Context) error {
	for _, net := range []Net{n.Functions, n.Deps} {
		if err := n.createBridge(ctx, net); err != nil {
			return err
		}
	}
	for _, k := range n.knobs() {
		if _, err := setKnob(k); err != nil {
			return err
		}
	}
	return nil
}

func (n *Networks) createBridge(ctx context.Context, net Net) error {
	b, err := net.conflist(filepath.Join(n.confDir, "ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.confDir, net.Name+".conflist"), b, 0o600); err != nil {
		return err
	}
	if err := run(ctx, "ip", "link", "show", net.Bridge); err != nil {
		if err := run(ctx, "ip", "link", "add", "name", net.Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	// Before the link is up: an IPv6 link-local address is never configured.
	if podman.HostIPv6() {
		if _, err := setKnob(knob{"ipv6", "/proc/sys/net/ipv6/conf/" + net.Bridge + "/disable_ipv6", "1"}); err != nil {
			return err
		}
	}
	addr := netip.PrefixFrom(net.Gateway, net.Subnet.Bits()).String()
	if out, _ := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show", "dev", net.Bridge).Output(); !bytes.Contains(out, []byte(" "+addr+" ")) {
		if err := run(ctx, "ip", "addr", "add", addr, "dev", net.Bridge); err != nil {
			return err
		}
	}
	// A bridge without an address of its own takes the lowest of its ports' and changes it
	// as containers come and go: the containers' ARP entries for the gateway then name a MAC
	// the bridge no longer answers to, and replies to the host (/fn/'s answers) are lost
	// until the entries expire, tens of seconds. Set, the address stays.
	if err := run(ctx, "ip", "link", "set", "dev", net.Bridge, "address", net.mac()); err != nil {
		return err
	}
	return run(ctx, "ip", "link", "set", net.Bridge, "up")
}

// Remove undoes Create and Confine: the chain, the bridges, the configuration.
func (n *Networks) Remove(ctx context.Context) error {
	var errs []error
	for _, f := range n.families() {
		errs = append(errs, n.removeChains(ctx, f))
	}
	for _, net := range []Net{n.Functions, n.Deps} {
		if run(ctx, "ip", "link", "show", net.Bridge) == nil {
			errs = append(errs, run(ctx, "ip", "link", "del", net.Bridge))
		}
		os.Remove(filepath.Join(n.confDir, net.Name+".conflist"))
	}
	os.RemoveAll(filepath.Join(n.confDir, "ipam"))
	os.Remove(filepath.Join(n.confDir, "subnet"))
	return errors.Join(errs...)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
