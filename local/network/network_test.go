package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	p := Policy{ProxyPort: 3128, Allow: []Allow{{netip.MustParsePrefix("192.168.7.0/24"), 5432}}}
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
		if len(tb.chains) != 2 {
			t.Errorf("chains after a switch: %v, want one generation's two", tb.chains)
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
					mustRun(t, "iptables", append([]string{"-w", "-t", "mangle", "-D"}, strings.Fields(j)[1:]...)...)
				}
			}
		}},
		{"iptables", func(t *testing.T) { // a rule of the chain removed
			tb, _ := n.read(ctx, ipv4)
			mustRun(t, "iptables", "-w", "-t", "mangle", "-D", n.chain+"-"+tb.gen+"-D", "-d", "10.0.0.0/8", "-j", "DROP")
		}},
		{"ip6tables", func(t *testing.T) {
			tb, _ := n.read(ctx, ipv6)
			mustRun(t, "ip6tables", "-w", "-t", "mangle", "-F", n.chain+"-"+tb.gen)
		}},
		{"ipv6", func(t *testing.T) {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.Functions.Bridge+"/disable_ipv6", []byte("0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"bridge", func(t *testing.T) { mustRun(t, "ip", "link", "del", n.Deps.Bridge) }},
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
	}
}

func TestParseAllow(t *testing.T) {
	for in, want := range map[string]string{"192.168.1.10/32:5432": "192.168.1.10/32:5432", "10.1.2.3/8:*": "10.0.0.0/8", "172.16.0.0/12": "172.16.0.0/12"} {
		if a, err := ParseAllow(in); err != nil || a.String() != want {
			t.Errorf("ParseAllow(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	for _, in := range []string{"", "192.168.1.10:5432", "192.168.1.0/24:0", "192.168.1.0/24:70000", "fd00::/8:53", "x/8:1"} {
		if a, err := ParseAllow(in); err == nil {
			t.Errorf("ParseAllow(%q) = %v, want an error", in, a)
		}
	}
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
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
	p := Policy{ProxyPort: 3128, Allow: []Allow{{netip.MustParsePrefix("172.16.0.0/12"), 5432}}, Nameservers: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
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
