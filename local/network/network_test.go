package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/local/podman"

	"github.com/sless-dev/sless/internal/testenv"
)

// instance makes an instance's networks and confinement on this host, removed at the end.
func instance(t testing.TB) *Networks {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (iptables, bridges)", nil)
	}
	for _, tool := range []string{"iptables-restore", "ip6tables-restore", "conntrack", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, err)
		}
	}
	b := make([]byte, 6)
	rand.Read(b)
	n, err := Plan(hex.EncodeToString(b), t.TempDir(), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := n.Remove(ctx); err != nil {
			t.Error(err)
		}
		for _, f := range []family{ipv4, ipv6} {
			if tb, _ := n.read(ctx, f); len(tb.rules)+len(tb.chains) != 0 {
				t.Errorf("%s after Remove: %v %v", f.save, tb.chains, tb.rules)
			}
		}
	})
	if err := n.Create(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConfineSwitchesAtomically(t *testing.T) {
	n := instance(t)
	ctx := context.Background()
	var restored []Restored
	n.OnRestore = func(r Restored) { restored = append(restored, r) }
	p := Policy{ProxyPort: 3128, Allow: []Allow{{Prefix: netip.MustParsePrefix("192.168.7.0/24"), Port: 5432}}}
	if err := n.Confine(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A watcher reads the table all along: every snapshot holds one whole generation, jumps and
	// every rule (iptables-save shows one committed state of the table); a flush and refill of
	// the chain in use would show it empty or half-written.
	normal := func(tb table) string {
		var cur []string // the generation jumped to: an old one may linger a moment, unused
		for _, r := range tb.rules {
			if c := strings.Fields(r)[1]; !n.owns(c) || strings.HasPrefix(c, n.chain+"-"+tb.gen) {
				cur = append(cur, r)
			}
		}
		s := strings.Join(cur, "\n")
		s = strings.ReplaceAll(s, n.chain+"-B", n.chain+"-A")
		return strings.ReplaceAll(s, "-b -j DROP", "-a -j DROP") // the hashlimit's name
	}
	tb, _ := n.read(ctx, ipv4)
	whole := normal(tb)
	stop := make(chan struct{})
	var snapshots, gaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tb, err := n.read(ctx, ipv4)
			if err != nil {
				continue
			}
			snapshots.Add(1)
			if normal(tb) != whole {
				gaps.Add(1)
			}
		}
	}()
	gens := map[string]bool{}
	for range 6 { // six restarts of sless up
		if err := n.Confine(ctx, p); err != nil {
			t.Fatal(err)
		}
		tb, _ := n.read(ctx, ipv4)
		gens[tb.gen] = true
		if len(tb.chains) != 3 {
			t.Errorf("chains after a switch: %v, want one generation's three (caps, deny, the default egress rule)", tb.chains)
		}
	}
	close(stop)
	wg.Wait()
	if gaps.Load() != 0 || snapshots.Load() == 0 {
		t.Errorf("%d of %d snapshots of the table during the switches lacked a whole generation", gaps.Load(), snapshots.Load())
	}
	t.Logf("%d snapshots during 6 switches, all whole", snapshots.Load())
	if !gens["A"] || !gens["B"] {
		t.Errorf("generations seen: %v, want A and B in turn", gens)
	}
	tb, _ = n.read(ctx, ipv4)
	text := strings.Join(tb.rules, "\n")
	for _, want := range []string{"-A PREROUTING -s " + n.subnet.String(), "-A FORWARD -s " + n.subnet.String(), "-A INPUT -s " + n.subnet.String(),
		"--dport 3128 -j RETURN", "-d 192.168.7.0/24 -p tcp -m tcp --dport 5432 -j RETURN", "-d 10.0.0.0/8 -j DROP", "-d 168.63.129.16/32 -j DROP",
		"--connlimit-above 1024", "--hashlimit-above 200/sec"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chain lacks %q:\n%s", want, text)
		}
	}
	if len(restored) != 0 {
		t.Errorf("restores reported while nothing was removed: %v", restored)
	}
}

func TestEnsureRestores(t *testing.T) {
	n := instance(t)
	ctx := context.Background()
	var mu sync.Mutex
	var restored []string
	n.OnRestore = func(r Restored) { mu.Lock(); restored = append(restored, r.Part); mu.Unlock() }
	if err := n.Ensure(ctx); err == nil {
		t.Error("Ensure before Confine passed")
	}
	if err := n.Confine(ctx, Policy{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 10 {
		if err := n.Ensure(ctx); err != nil || len(restored) != 0 {
			t.Fatalf("Ensure with everything in place: %v, restored %v", err, restored)
		}
	}
	t.Logf("Ensure with everything in place (the check before every container start): %v", time.Since(start)/10)
	for _, c := range []struct {
		part   string
		break_ func(t *testing.T)
	}{
		{"iptables", func(t *testing.T) { // the jump removed by hand (a firewall reload)
			tb, _ := n.read(ctx, ipv4)
			for _, j := range tb.jumps {
				if strings.HasPrefix(j, "-A PREROUTING") {
					testenv.MustRun(t, "iptables", append([]string{"-w", "-t", "mangle", "-D"}, strings.Fields(j)[1:]...)...)
				}
			}
		}},
		{"iptables", func(t *testing.T) { // a rule of the chain removed
			tb, _ := n.read(ctx, ipv4)
			testenv.MustRun(t, "iptables", "-w", "-t", "mangle", "-D", n.chain+"-"+tb.gen+"-N", "-d", "10.0.0.0/8", "-j", "DROP")
		}},
		{"ip6tables", func(t *testing.T) {
			tb, _ := n.read(ctx, ipv6)
			testenv.MustRun(t, "ip6tables", "-w", "-t", "mangle", "-F", n.chain+"-"+tb.gen)
		}},
		{"ipv6", func(t *testing.T) {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.Functions.Bridge+"/disable_ipv6", []byte("0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"bridge", func(t *testing.T) { testenv.MustRun(t, "ip", "link", "del", n.Deps.Bridge) }},
		{"br_netfilter", func(t *testing.T) { // bridged traffic no longer seen by iptables
			if err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		mu.Lock()
		restored = nil
		mu.Unlock()
		c.break_(t)
		// Callers at once share one check; each returns only once it is restored.
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := n.Ensure(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		mu.Lock()
		got := restored
		mu.Unlock()
		if len(got) == 0 || got[0] != c.part {
			t.Errorf("after breaking %s: restored %v", c.part, got)
		}
		for i, f := range []family{ipv4, ipv6} {
			tb, _ := n.read(ctx, f)
			if strings.Join(tb.rules, "\n") != strings.Join(n.applied[i], "\n") || tb.gen == "" {
				t.Errorf("after breaking %s, %s shows %v", c.part, f.save, tb.rules)
			}
		}
		if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/" + n.Functions.Bridge + "/disable_ipv6"); strings.TrimSpace(string(b)) != "1" {
			t.Errorf("after breaking %s, IPv6 on %s: disable_ipv6=%s", c.part, n.Functions.Bridge, b)
		}
		if b, _ := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables"); strings.TrimSpace(string(b)) != "1" {
			t.Errorf("after breaking %s, bridge-nf-call-iptables=%s", c.part, b)
		}
	}
}

// BenchmarkEnsure is the check every container start waits for, with everything in place.
func BenchmarkEnsure(b *testing.B) {
	n := instance(b)
	ctx := context.Background()
	if err := n.Confine(ctx, Policy{ProxyPort: 3128}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := n.Ensure(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Other bridges' containers stay denied whatever --egress-allow opens (172.16/12 holds docker0's
// 172.17/16), and installs get no exception at all: their drop comes first.
func TestRenderOrder(t *testing.T) {
	n, err := Plan("0123456789ab", t.TempDir(), netip.MustParsePrefix("10.89.250.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{ProxyPort: 3128, Allow: []Allow{{Prefix: netip.MustParsePrefix("172.16.0.0/12"), Port: 5432}}, Nameservers: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	rules := n.render(ipv4, p, []netip.Prefix{netip.MustParsePrefix("172.17.0.0/16")}, "A")
	at := func(sub string) int {
		for i, r := range rules {
			if strings.Contains(r, sub) {
				return i
			}
		}
		t.Fatalf("no rule with %q in\n%s", sub, strings.Join(rules, "\n"))
		return -1
	}
	proxy, deps, local := at("--dport 3128 -j RETURN"), at("-s 10.89.250.128/25 -j DROP"), at("--dst-type LOCAL -j DROP")
	bridge, allow, dns := at("-d 172.17.0.0/16 -j DROP"), at("-d 172.16.0.0/12 -p tcp -m tcp --dport 5432 -j RETURN"), at("-d 10.0.0.2/32 -p udp -m udp --dport 53 -j RETURN")
	private := at("-d 172.16.0.0/12 -j DROP")
	if !(proxy < deps && deps < local && local < bridge && bridge < allow && bridge < dns && allow < private && dns < private) {
		t.Errorf("order: proxy %d, installs' drop %d, host %d, other bridge %d, allow %d, resolver %d, private ranges %d\n%s",
			proxy, deps, local, bridge, allow, dns, private, strings.Join(rules, "\n"))
	}
}

// Per-namespace egress: a registered container goes to its namespace's chain (or the default's),
// one not registered is dropped, and the namespaces' rules are theirs alone.
func TestRenderNamespaces(t *testing.T) {
	n, err := Plan("0123456789ab", t.TempDir(), netip.MustParsePrefix("10.89.250.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	n.members = map[string]Member{"a": {MAC: "02:00:00:00:00:0a", Namespace: "ns-a"}, "b": {MAC: "02:00:00:00:00:0b", Namespace: "ns-b"}}
	p := Policy{Allow: []Allow{{Prefix: netip.MustParsePrefix("192.168.1.0/24"), Port: 0}},
		Namespaces: map[string]NamespaceRule{"ns-b": {None: true, Allow: []Allow{{Prefix: netip.MustParsePrefix("10.1.2.3/32"), Port: 5432}}}}}
	got := strings.Join(n.render(ipv4, p, nil, "A"), "\n")
	for _, want := range []string{
		"-A SLESS-0123456789AB-A-D -s 10.89.250.0/25 -m mac --mac-source 02:00:00:00:00:0A -g SLESS-0123456789AB-A-N\n" +
			"-A SLESS-0123456789AB-A-D -s 10.89.250.0/25 -m mac --mac-source 02:00:00:00:00:0B -g SLESS-0123456789AB-A-N0\n" +
			"-A SLESS-0123456789AB-A-D -s 10.89.250.0/25 -j DROP\n" +
			"-A SLESS-0123456789AB-A-N -d 192.168.1.0/24 -j RETURN\n",
		"-A SLESS-0123456789AB-A-N -d 10.0.0.0/8 -j DROP",
		"-A SLESS-0123456789AB-A-N0 -d 10.1.2.3/32 -p tcp -m tcp --dport 5432 -j RETURN\n" +
			"-A SLESS-0123456789AB-A-N0 -d 10.1.2.3/32 -p udp -m udp --dport 5432 -j RETURN\n" +
			"-A SLESS-0123456789AB-A-N0 -j DROP",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no\n%s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "-A SLESS-0123456789AB-A-N0 -d 192.168.1.0/24") {
		t.Errorf("the default's allow is in a namespace's own rule:\n%s", got)
	}
}

// The bridges' IPv6 layers on their own, with IPv6 on in the "containers" (network namespaces on
// the functions bridge, as a container that turned it back on would be): the bridge has no
// address of the host's to reach, and ip6tables drops what one container sends another.
func TestNoIPv6AcrossTheBridge(t *testing.T) {
	if !podman.HostIPv6() {
		testenv.Missing(t, "IPv6 in the kernel (booted with ipv6.disable=1)", nil)
	}
	n := instance(t)
	ctx := context.Background()
	if err := n.Confine(ctx, Policy{}); err != nil {
		t.Fatal(err)
	}
	canary, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	testenv.AcceptAndClose(canary)
	port := canary.Addr().(*net.TCPAddr).Port
	type ct struct{ ns, host, mac string }
	var cts []ct
	for i := range 2 {
		tag := fmt.Sprintf("%s%d", n.Functions.Bridge[3:9], i)
		c := ct{ns: "slv6-" + tag, host: "slv6" + tag}
		t.Cleanup(func() {
			exec.Command("ip", "link", "del", c.host).Run()
			exec.Command("ip", "netns", "del", c.ns).Run()
		})
		testenv.MustRun(t, "ip", "netns", "add", c.ns)
		testenv.MustRun(t, "ip", "link", "add", c.host, "type", "veth", "peer", "name", "eth0", "netns", c.ns)
		testenv.MustRun(t, "ip", "link", "set", c.host, "master", n.Functions.Bridge, "up")
		testenv.MustRun(t, "ip", "netns", "exec", c.ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.eth0.disable_ipv6=0", "net.ipv6.conf.eth0.accept_dad=0")
		testenv.MustRun(t, "ip", "-n", c.ns, "link", "set", "eth0", "up")
		testenv.MustRun(t, "ip", "-n", c.ns, "link", "set", "lo", "up")
		out, err := exec.Command("ip", "-n", c.ns, "-o", "link", "show", "eth0").Output()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		for j := range f {
			if f[j] == "link/ether" {
				c.mac = f[j+1]
			}
		}
		cts = append(cts, c)
	}
	// The second "container" listens on [::]:8080.
	srv := exec.Command("ip", "netns", "exec", cts[1].ns, "python3", "-c",
		"import socket\ns = socket.socket(socket.AF_INET6)\ns.bind(('::', 8080))\ns.listen()\nwhile True:\n    s.accept()[0].close()\n")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	eui := func(mac string) string { return testenv.LinkLocal(t, mac) }
	// The first probes from its namespace; the control at the end shows the probe can succeed.
	probe := func(addr string, port int) string {
		out, _ := exec.Command("ip", "netns", "exec", cts[0].ns, "python3", "-c",
			fmt.Sprintf("import socket\ns = socket.socket(socket.AF_INET6)\ns.settimeout(1.5)\ntry:\n    s.connect(('%s', %d, 0, socket.if_nametoindex('eth0')))\n    print('reached')\nexcept Exception as e:\n    print('unreachable', type(e).__name__)\n", addr, port)).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	g := n.Functions.Gateway.As4()
	targets := map[string][2]any{
		"bridge":          {eui(fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", g[0], g[1], g[2], g[3])), port},
		"other container": {eui(cts[1].mac), 8080},
	}
	for name, tg := range targets {
		if got := probe(tg[0].(string), tg[1].(int)); !strings.HasPrefix(got, "unreachable") {
			t.Errorf("%s (%s) over IPv6 from a namespace on the bridge: %s", name, tg[0], got)
		}
	}
	// Control: without the ip6tables chain the other container answers (the probe works).
	if err := n.removeChains(ctx, ipv6); err != nil {
		t.Fatal(err)
	}
	if got := probe(eui(cts[1].mac), 8080); got != "reached" {
		t.Errorf("control: without the ip6tables chain the other container: %s, want reached", got)
	}
	if err := n.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
}

// A connection a container opened while the chain was missing (a firewall reload, the moment
// before a restart's switch) must not outlive the chain's return: its conntrack entry would pass
// the chain's first rule (ESTABLISHED) for its whole life. A "container" (a network namespace on
// the functions bridge) connects to a host canary with the jumps removed, then Ensure restores
// them and the connection carries nothing more.
func TestConnectionsOpenedUnconfinedAreForgotten(t *testing.T) {
	n := instance(t)
	ctx := context.Background()
	if err := n.Confine(ctx, Policy{}); err != nil {
		t.Fatal(err)
	}
	// The host canary on the bridge's gateway address echoes what it gets.
	canary, err := net.Listen("tcp", net.JoinHostPort(n.Functions.Gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	go func() {
		for {
			c, err := canary.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 64)
				for {
					k, err := c.Read(b)
					if err != nil {
						return
					}
					c.Write(b[:k])
				}
			}()
		}
	}()
	port := canary.Addr().(*net.TCPAddr).Port
	tag := n.Functions.Bridge[3:9]
	ns, host := "slct-"+tag, "slct"+tag
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	addr := n.Functions.Gateway.Next().Next().Next()
	testenv.MustRun(t, "ip", "netns", "add", ns)
	testenv.MustRun(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
	testenv.MustRun(t, "ip", "link", "set", host, "master", n.Functions.Bridge, "up")
	testenv.MustRun(t, "ip", "-n", ns, "addr", "add", netip.PrefixFrom(addr, n.Functions.Subnet.Bits()).String(), "dev", "eth0")
	testenv.MustRun(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	testenv.MustRun(t, "ip", "-n", ns, "link", "set", "lo", "up")

	// Control: with the confinement in place the canary is out of reach.
	connect := fmt.Sprintf("import socket, sys\ns = socket.create_connection(('%s', %d), timeout=1.5)\n", n.Functions.Gateway, port)
	if out, err := exec.Command("ip", "netns", "exec", ns, "python3", "-c", connect+"print('reached')").CombinedOutput(); err == nil {
		t.Fatalf("the host canary reached with the chain in place: %s", out)
	}
	// The jumps removed by hand, as a firewall reload does.
	tb, err := n.read(ctx, ipv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range tb.jumps {
		f := strings.Fields(j)
		testenv.MustRun(t, "iptables", append([]string{"-w", "-t", "mangle", "-D"}, f[1:]...)...)
	}
	// The "container" connects now and then echoes one byte per line it is given.
	cmd := exec.Command("ip", "netns", "exec", ns, "python3", "-u", "-c", connect+`print('connected')
for line in sys.stdin:
    try:
        s.sendall(b'x')
        print('echo' if s.recv(1) == b'x' else 'closed')
    except Exception as e:
        print('cut', type(e).__name__)
`)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 4)
	go func() {
		b := make([]byte, 256)
		var acc string
		for {
			k, err := stdout.Read(b)
			acc += string(b[:k])
			for {
				i := strings.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- acc[:i]
				acc = acc[i+1:]
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				return "exited"
			}
			return l
		case <-time.After(10 * time.Second):
			return "no answer"
		}
	}
	if got := next(); got != "connected" {
		t.Fatalf("connecting with the jumps removed: %s", got)
	}
	fmt.Fprintln(stdin)
	if got := next(); got != "echo" {
		t.Fatalf("control: the connection before the restore: %s, want echo", got)
	}
	if err := n.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin)
	if got := next(); !strings.HasPrefix(got, "cut") {
		t.Errorf("the connection opened while the chain was missing, after Ensure restored it: %s, want cut", got)
	}
}
