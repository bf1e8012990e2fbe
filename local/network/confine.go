package network

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/sless-dev/sless/local/podman"
)

// The confinement is a pair of mangle chains per generation (IPv4): the caps chain, jumped to
// from PREROUTING for the instance's subnet, and the deny chain it ends in, jumped to also from
// FORWARD and INPUT so that a destination DNAT rewrote (a ClusterIP, a published port) is judged
// again as what it became. IPv6 has one chain that drops everything arriving on the instance's
// bridges. A change never edits the chain in use: the next generation (A ↔ B) is written and
// the jumps are switched to it in one iptables-restore transaction, then the old one is removed.

// family is iptables or ip6tables.
type family struct {
	save, restore string
	v6            bool
}

var (
	ipv4 = family{"iptables-save", "iptables-restore", false}
	ipv6 = family{"ip6tables-save", "ip6tables-restore", true}
)

// owns reports whether chain is one of the instance's (a generation's, or the single chain of
// versions before generations).
func (n *Networks) owns(chain string) bool {
	return chain == n.chain || strings.HasPrefix(chain, n.chain+"-")
}

// render is the restore text of generation gen's chains and jumps (no table header, no COMMIT).
func (n *Networks) render(f family, p Policy, others []netip.Prefix, gen string) []string {
	caps, deny := n.chain+"-"+gen, n.chain+"-"+gen+"-D"
	if f.v6 {
		return []string{":" + caps + " - [0:0]",
			"-A " + caps + " -i " + n.Functions.Bridge + " -j DROP",
			"-A " + caps + " -i " + n.Deps.Bridge + " -j DROP",
			"-I PREROUTING 1 -j " + caps}
	}
	rate, max := p.ConnRate, p.ConnMax
	if rate <= 0 {
		rate = DefaultConnRate
	}
	if max <= 0 {
		max = DefaultConnMax
	}
	const established = "-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"
	hashName := "sl" + strings.ToLower(n.chain[len("SLESS-"):][:min(10, len(n.chain)-len("SLESS-"))]) + "-" + strings.ToLower(gen)
	l := []string{":" + caps + " - [0:0]", ":" + deny + " - [0:0]",
		// Only new connections are judged: replies to what the host opened (/fn/ → a function)
		// pass, and what passed once is not counted again.
		"-A " + caps + " " + established,
		fmt.Sprintf("-A %s -m hashlimit --hashlimit-above %d/sec --hashlimit-burst %d --hashlimit-mode srcip --hashlimit-name %s -j DROP", caps, rate, 2*rate, hashName),
		fmt.Sprintf("-A %s -m connlimit --connlimit-above %d --connlimit-mask 32 --connlimit-saddr -j DROP", caps, max),
		"-A " + caps + " -j " + deny,
		"-A " + deny + " " + established,
	}
	if p.ProxyPort > 0 {
		l = append(l, fmt.Sprintf("-A %s -s %s -d %s/32 -p tcp -m tcp --dport %d -j RETURN", deny, n.Deps.Subnet, n.Deps.Gateway, p.ProxyPort))
	}
	l = append(l,
		"-A "+deny+" -s "+n.Deps.Subnet.String()+" -j DROP", // installs: nothing but the proxy
		"-A "+deny+" -m addrtype --dst-type LOCAL -j DROP",  // any address of the host, whatever the allow list says
		"-A "+deny+" -m addrtype --dst-type BROADCAST -j DROP",
		"-A "+deny+" -d "+n.subnet.String()+" -j DROP") // another container, either network
	// Other bridges' containers before any exception: an allowed LAN range (172.16/12) must not
	// open docker0's containers, nor 10/8 podman's or another instance's.
	for _, o := range others {
		l = append(l, "-A "+deny+" -d "+o.String()+" -j DROP")
	}
	allow := func(dst netip.Prefix, port uint16) { allowTo(&l, deny, dst, port) }
	for _, ns := range p.Nameservers {
		allow(netip.PrefixFrom(ns, 32), 53)
	}
	// Functions, jobs and cron runs by container (egress.go): each registered one goes to its
	// namespace's chain, or the default's, and returns past this chain when it falls off it (-g);
	// one the runner did not register reaches nothing.
	fn := n.Functions.Subnet.String()
	def := caps + "-N"
	nsChains := []string{":" + def + " - [0:0]"}
	chainOf := map[string]string{}
	rules := map[string][]string{}
	for i, ns := range sortedNamespaces(p) {
		c := fmt.Sprintf("%s-N%d", caps, i)
		chainOf[ns] = c
		nsChains = append(nsChains, ":"+c+" - [0:0]")
		rule := p.Namespaces[ns]
		var r []string
		for _, a := range rule.Allow {
			allowTo(&r, c, a.Prefix, a.Port)
		}
		if rule.None {
			r = append(r, "-A "+c+" -j DROP")
		} else {
			for _, d := range Denied {
				r = append(r, "-A "+c+" -d "+d.String()+" -j DROP")
			}
		}
		rules[c] = r
	}
	for _, m := range n.sortedMembers() {
		c, ok := chainOf[m.Namespace]
		if !ok {
			c = def
		}
		l = append(l, "-A "+deny+" -s "+fn+" -m mac --mac-source "+strings.ToUpper(m.MAC)+" -g "+c)
	}
	l = append(l, "-A "+deny+" -s "+fn+" -j DROP")
	var d []string
	for _, a := range p.Allow {
		allowTo(&d, def, a.Prefix, a.Port)
	}
	if p.None {
		d = append(d, "-A "+def+" -j DROP")
	} else {
		for _, den := range Denied {
			d = append(d, "-A "+def+" -d "+den.String()+" -j DROP")
		}
	}
	l = append(l, d...)
	for _, ns := range sortedNamespaces(p) {
		l = append(l, rules[chainOf[ns]]...)
	}
	l = append(nsChains, l...)
	s := n.subnet.String()
	return append(l, "-I PREROUTING 1 -s "+s+" -j "+caps, "-I FORWARD 1 -s "+s+" -j "+deny, "-I INPUT 1 -s "+s+" -j "+deny)
}

// allowTo appends to l the rules of chain that let dst (on port, 0: any) pass.
func allowTo(l *[]string, chain string, dst netip.Prefix, port uint16) {
	if port == 0 {
		*l = append(*l, fmt.Sprintf("-A %s -d %s -j RETURN", chain, dst))
		return
	}
	for _, proto := range []string{"tcp", "udp"} {
		*l = append(*l, fmt.Sprintf("-A %s -d %s -p %s -m %s --dport %d -j RETURN", chain, dst, proto, proto, port))
	}
}

// table is what iptables-save shows of the instance in the mangle table.
type table struct {
	chains []string // declared chains of the instance
	jumps  []string // "-A PREROUTING … -j SLESS-…" lines into them from the built-in chains
	rules  []string // every line of the instance: its chains' rules and the jumps, in order
	gen    string   // the generation the PREROUTING jump names ("" if none)
}

func (n *Networks) read(ctx context.Context, f family) (table, error) {
	out, err := exec.CommandContext(ctx, f.save, "-t", "mangle").Output()
	if err != nil {
		return table{}, fmt.Errorf("%s: %w", f.save, err)
	}
	var t table
	for _, line := range strings.Split(string(out), "\n") {
		fs := strings.Fields(line)
		switch {
		case len(fs) >= 1 && strings.HasPrefix(fs[0], ":") && n.owns(fs[0][1:]):
			t.chains = append(t.chains, fs[0][1:])
		case len(fs) >= 2 && fs[0] == "-A" && n.owns(fs[1]):
			t.rules = append(t.rules, line)
		case len(fs) >= 3 && fs[0] == "-A" && fs[len(fs)-2] == "-j" && n.owns(fs[len(fs)-1]):
			t.jumps = append(t.jumps, line)
			t.rules = append(t.rules, line)
			if fs[1] == "PREROUTING" {
				t.gen = strings.TrimPrefix(strings.TrimSuffix(fs[len(fs)-1], "-D"), n.chain+"-")
			}
		}
	}
	return t, nil
}

// switchTo writes the generation after cur's and moves every jump to it in one transaction,
// then removes the chains of cur (and any leftover).
func (n *Networks) switchTo(ctx context.Context, f family, cur table, p Policy, others []netip.Prefix) error {
	gen := "A"
	if cur.gen == "A" {
		gen = "B"
	}
	var b strings.Builder
	b.WriteString("*mangle\n")
	for _, l := range n.render(f, p, others, gen) {
		b.WriteString(l + "\n")
	}
	for _, j := range cur.jumps {
		b.WriteString("-D" + strings.TrimPrefix(j, "-A") + "\n")
	}
	b.WriteString("COMMIT\n")
	if err := restore(ctx, f, b.String()); err != nil {
		return err
	}
	keep := n.chain + "-" + gen
	var old []string
	for _, c := range cur.chains {
		if c != keep && !strings.HasPrefix(c, keep+"-") {
			old = append(old, c)
		}
	}
	return n.dropChains(ctx, f, old)
}

func (n *Networks) dropChains(ctx context.Context, f family, chains []string) error {
	if len(chains) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("*mangle\n")
	for _, c := range chains {
		b.WriteString("-F " + c + "\n")
	}
	for _, c := range chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return restore(ctx, f, b.String())
}

func restore(ctx context.Context, f family, text string) error {
	cmd := exec.CommandContext(ctx, f.restore, "-w", "--noflush")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s\n%s", f.restore, err, strings.TrimSpace(string(out)), text)
	}
	return nil
}

// forgetConnections removes the conntrack entries of connections the instance's containers
// opened: one opened while the chain was missing would otherwise pass its first rule
// (ESTABLISHED) for its whole life. Replies to the host's own connections (/fn/) are untouched:
// their original source is the host.
func (n *Networks) forgetConnections(ctx context.Context) error {
	m := ^uint32(0) << (32 - n.subnet.Bits())
	var err error
	// conntrack 1.4.7 stops at an entry that expired between its listing and its deletion
	// ("such conntrack doesn't exist"): another pass deletes the rest.
	for range 3 {
		var out []byte
		out, err = exec.CommandContext(ctx, "conntrack", "-D", "-f", "ipv4", "-s", n.subnet.Addr().String(),
			"--mask-src", fmt.Sprintf("%d.%d.%d.%d", byte(m>>24), byte(m>>16), byte(m>>8), byte(m))).CombinedOutput()
		if err == nil || strings.Contains(string(out), "flow entries have been deleted") {
			return nil
		}
		err = fmt.Errorf("conntrack -D: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return err
}

// knob is one kernel setting the confinement rests on.
type knob struct{ part, path, want string }

// knobs are br_netfilter's (without which containers on one bridge reach each other unseen by
// iptables, and bridged IPv6 unseen by ip6tables) and IPv6 off on the instance's bridges (no
// link-local address of the host's for a container to reach).
func (n *Networks) knobs() []knob {
	k := []knob{{"br_netfilter", "/proc/sys/net/bridge/bridge-nf-call-iptables", "1"}}
	if !podman.HostIPv6() {
		return k
	}
	return append(k,
		knob{"br_netfilter", "/proc/sys/net/bridge/bridge-nf-call-ip6tables", "1"},
		knob{"ipv6", "/proc/sys/net/ipv6/conf/" + n.Functions.Bridge + "/disable_ipv6", "1"},
		knob{"ipv6", "/proc/sys/net/ipv6/conf/" + n.Deps.Bridge + "/disable_ipv6", "1"})
}

// setKnob makes k hold its value; changed is whether it did not.
func setKnob(k knob) (changed bool, err error) {
	if strings.HasPrefix(k.path, "/proc/sys/net/bridge/") {
		if _, err := os.Stat(k.path); err != nil {
			exec.Command("modprobe", "br_netfilter").Run()
		}
	}
	b, err := os.ReadFile(k.path)
	if err != nil {
		if strings.HasPrefix(k.path, "/proc/sys/net/bridge/") {
			return false, fmt.Errorf("network: br_netfilter is needed to keep containers on one bridge apart (modprobe br_netfilter): %w", err)
		}
		return false, fmt.Errorf("network: %w", err)
	}
	if strings.TrimSpace(string(b)) == k.want {
		return false, nil
	}
	if err := os.WriteFile(k.path, []byte(k.want), 0o644); err != nil {
		return true, fmt.Errorf("network: setting %s: %w", k.path, err)
	}
	return true, nil
}

// removeChains deletes every chain and jump of the instance in f's mangle table.
func (n *Networks) removeChains(ctx context.Context, f family) error {
	t, err := n.read(ctx, f)
	if err != nil {
		return err
	}
	if len(t.jumps) > 0 {
		var b strings.Builder
		b.WriteString("*mangle\n")
		for _, j := range t.jumps {
			b.WriteString("-D" + strings.TrimPrefix(j, "-A") + "\n")
		}
		b.WriteString("COMMIT\n")
		if err := restore(ctx, f, b.String()); err != nil {
			return err
		}
	}
	return n.dropChains(ctx, f, t.chains)
}
