package local_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/testenv"
)

// pyLooper, once called with ?start=JSON (name → host:port), connects to every target from 32
// threads in a tight loop for the life of its container (sless up restarts included), and
// answers its counts: attempts per target and connections made.
const pyLooper = `import json, socket, threading
counts = {}
lock = threading.Lock()
def loop(targets):
    while True:
        for name, hp in targets.items():
            host, port = hp.rsplit(':', 1)
            s = socket.socket()
            s.settimeout(0.1)
            try:
                s.connect((host, int(port)))
                ok = 1
            except Exception:
                ok = 0
            finally:
                s.close()
            with lock:
                c = counts.setdefault(name, [0, 0])
                c[0] += 1
                c[1] += ok
def handle(event):
    q = event.get('query') or {}
    if 'start' in q and not counts:
        targets = json.loads(q['start'][0])
        for name in targets:
            counts[name] = [0, 0]
        for _ in range(32):
            threading.Thread(target=loop, args=(targets,), daemon=True).start()
    with lock:
        return {k: {'attempts': v[0], 'connected': v[1]} for k, v in counts.items()}
`

// pyFlood sends one UDP datagram to each of ?n= ports of ?host=.
const pyFlood = `import socket
def handle(event):
    host, n = event['query']['host'][0], int(event['query']['n'][0])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = 0
    for port in range(1, n + 1):
        try:
            s.sendto(b'x', (host, port))
            sent += 1
        except OSError:
            pass
    return sent
`

// TestConfinementHolds is the second round of attacks on the single host's network confinement,
// each while another tenant's function keeps serving the same image: DNAT (a ClusterIP, a
// published port) to the host and to another bridge's container, a UDP flood for the host's
// conntrack table, the chain removed by hand, five restarts of sless up under a tight loop of
// connection attempts, and a container start while the chain is missing.
func TestConfinementHolds(t *testing.T) {
	podman := testenv.NewPodman(t)
	outside := testenv.StartOutside(t)
	canaryLn, err := net.Listen("tcp", ":0") // every address, IPv4 and IPv6
	if err != nil {
		t.Fatal(err)
	}
	var canaryHits atomic.Int64
	go http.Serve(canaryLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { canaryHits.Add(1) }))
	t.Cleanup(func() { canaryLn.Close() })
	canaryPort := canaryLn.Addr().(*net.TCPAddr).Port

	dataDir := t.TempDir()
	// A high rate cap, so that the concurrent cap is what holds the flood below.
	// The metadata stand-in allowed on its port, as an admin allows a LAN database.
	flags := []string{"--egress-conn-max", "300", "--egress-conn-rate", "5000", "--autoscale-stable-window", "10m",
		"--egress-allow", "169.254.77.77/32:8000"}
	u := startUp(t, dataDir, "", "", flags...)
	listen, regAddr := u.Listen, u.RegAddr
	outer := t
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(dataDir, "cni", "subnet"))
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix(strings.TrimSpace(string(b)))
	fnGW := subnet.Addr().Next()
	hosts := hostAddresses(t, subnet)

	victim, before := deployVictim(t, u)
	victimServes := func(t *testing.T) {
		t.Helper()
		if code, body := u.get("/fn/" + victim.Namespace() + "/v"); code != 200 || body != "victim" {
			t.Errorf("the victim answers %d %s", code, body)
		}
		if f, _ := victim.GetFunction(ctx, "v"); f == nil || f.Status.Image != before.Status.Image {
			t.Errorf("the victim's image changed: %+v", f)
		}
	}
	probe := func(t *testing.T, targets map[string]string) map[string]any {
		t.Helper()
		tj, _ := json.Marshal(targets)
		code, body := u.get("/fn/" + u.c.Namespace() + "/probe?t=" + url.QueryEscape(string(tj)))
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%d %s", code, body)
		}
		return got
	}
	u.deploy(t, "probe", "python3.11", map[string]string{"handler.py": pyProbe})
	// The instance's own rules: its chains (SLESS-<instance>-<generation>…) and the jumps from
	// its subnet. Not the whole table: another instance on the host may hold rules a wait here
	// would take for this one's.
	mangle := func() []string {
		out, _ := exec.Command("iptables-save", "-t", "mangle").Output()
		return strings.Split(string(out), "\n")
	}
	var chainBase string
	for _, l := range mangle() {
		if target, ok := strings.CutPrefix(l, "-A PREROUTING -s "+subnet.String()+" -j "); ok {
			chainBase = target[:strings.LastIndex(target, "-")+1] // "SLESS-<instance>-"
		}
	}
	if chainBase == "" {
		t.Fatalf("no jump from %s in the mangle table", subnet)
	}
	ourRules := func() string {
		var ours []string
		for _, l := range mangle() {
			if strings.Contains(l, chainBase) || strings.Contains(l, "-s "+subnet.String()+" ") {
				ours = append(ours, l)
			}
		}
		return strings.Join(ours, "\n")
	}

	t.Run("DNAT to the host and to another bridge's container", func(t *testing.T) {
		// Another bridge with a container (a network namespace) on a public range, as a VM
		// bridge or a docker network with a routed range could be.
		tag := randomTag()
		br, veth, ns := "slt"+tag, "slt"+tag+"h", "slt-"+tag
		t.Cleanup(func() {
			exec.Command("ip", "link", "del", br).Run()
			exec.Command("ip", "link", "del", veth).Run()
			exec.Command("ip", "netns", "del", ns).Run()
		})
		for _, args := range [][]string{
			{"link", "add", br, "type", "bridge"}, {"addr", "add", "203.0.113.1/24", "dev", br}, {"link", "set", br, "up"},
			{"netns", "add", ns}, {"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", veth, "master", br}, {"link", "set", veth, "up"},
			{"-n", ns, "addr", "add", "203.0.113.2/24", "dev", "eth0"}, {"-n", ns, "link", "set", "eth0", "up"},
		} {
			testenv.MustRun(t, "ip", args...)
		}
		srv := exec.Command("ip", "netns", "exec", ns, "python3", "-m", "http.server", "--bind", "203.0.113.2", "8000", "--directory", t.TempDir())
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
		waitFor(t, 10*time.Second, func() bool {
			resp, err := (&http.Client{Timeout: time.Second}).Get("http://203.0.113.2:8000/")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		}, "the other bridge's server")
		// The confinement learns of the new bridge at its next check.
		waitFor(t, 10*time.Second, func() bool { return strings.Contains(ourRules(), "-d 203.0.113.0/24 -j DROP") }, "the other bridge's range denied")

		// ClusterIP-style: addresses that are nothing until DNAT makes them the host's canary or
		// the other bridge's server (only for the instance's containers: nothing leaves the host).
		dnat := [][]string{
			{"-s", subnet.String(), "-d", "198.51.100.10/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", hosts[0], canaryPort)},
			{"-s", subnet.String(), "-d", "198.51.100.11/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", "203.0.113.2:8000"},
		}
		for _, r := range dnat {
			testenv.MustRun(t, "iptables", append([]string{"-w", "-t", "nat", "-I", "PREROUTING", "1"}, r...)...)
			t.Cleanup(func() {
				exec.Command("iptables", append([]string{"-w", "-t", "nat", "-D", "PREROUTING"}, r...)...).Run()
			})
		}
		got := probe(t, map[string]string{"dnat_host": "http://198.51.100.10/", "dnat_other_bridge": "http://198.51.100.11/",
			"other_bridge": "http://203.0.113.2:8000/", "outside": outside.URL + "/", "allowed": outside.MetadataURL + "/"})
		for k, v := range got {
			if want := any("unreachable"); k != "outside" && k != "allowed" && v != want {
				t.Errorf("%s: %v, want unreachable", k, v)
			}
		}
		// TestContainment, without --egress-allow, finds the same address unreachable.
		if got["outside"] != float64(200) || got["allowed"] != float64(200) {
			t.Errorf("the outside: %v, the allowed metadata stand-in: %v; want 200 for both", got["outside"], got["allowed"])
		}
		victimServes(t)
	})

	t.Run("UDP to 50,000 ports", func(t *testing.T) {
		u.deploy(t, "flood", "python3.11", map[string]string{"handler.py": pyFlood})
		ip := containerIP(t, podman, "flood")
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(outside.URL, "http://"))
		code, body := u.get("/fn/" + u.c.Namespace() + "/flood?n=50000&host=" + host)
		if code != 200 || body != "50000" {
			t.Fatalf("flood: %d %s", code, body)
		}
		out, _ := exec.Command("conntrack", "-L", "-s", ip).Output()
		n := strings.Count(string(out), "\n")
		t.Logf("after 50,000 datagrams from %s: %d conntrack entries of it", ip, n)
		if n > 300 {
			t.Errorf("%d conntrack entries from one container, want at most its cap of 300", n)
		}
		// The host's own connections still work: 200 at once to a local service.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		testenv.AcceptAndClose(ln)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
				if err != nil {
					failed.Add(1)
					return
				}
				c.Close()
			}()
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Errorf("%d of the host's 200 connections failed", failed.Load())
		}
		victimServes(t)
	})

	jump := func() string { // the instance's PREROUTING jump, as iptables-save shows it
		for _, l := range strings.Split(ourRules(), "\n") {
			if strings.HasPrefix(l, "-A PREROUTING -s "+subnet.String()+" -j SLESS-") {
				return l
			}
		}
		return ""
	}
	removeJump := func(t *testing.T) {
		t.Helper()
		j := jump()
		if j == "" {
			t.Fatal("no jump to the instance's chain")
		}
		testenv.MustRun(t, "iptables", append([]string{"-w", "-t", "mangle", "-D"}, strings.Fields(j)[1:]...)...)
	}
	restoredMetric := func(t *testing.T) int {
		t.Helper()
		code, m := u.Metrics("")
		if code != 200 {
			t.Fatalf("/metrics: %d %.300s", code, m)
		}
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, `sless_confinement_restored_total{part="iptables"} `); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}

	t.Run("the chain removed by hand is back within seconds", func(t *testing.T) {
		removeJump(t)
		start := time.Now()
		waitFor(t, 10*time.Second, func() bool { return jump() != "" }, "the jump restored")
		t.Logf("the jump was back after %v", time.Since(start).Round(10*time.Millisecond))
		// Reported right after the switch: the jump may show a moment before the count does.
		waitFor(t, 5*time.Second, func() bool { return restoredMetric(t) >= 1 }, `sless_confinement_restored_total{part="iptables"} ≥ 1`)
		if !strings.Contains(u.LogWithout(`"msg":"request"`), "network confinement restored") {
			t.Error("no log line for the restore")
		}
		victimServes(t)
	})

	t.Run("five restarts under a tight loop of connections to the host", func(t *testing.T) {
		targets := map[string]string{"gateway": fmt.Sprintf("%s:%d", fnGW, canaryPort), "outside": strings.TrimPrefix(outside.URL, "http://")}
		for i, h := range hosts {
			targets[fmt.Sprintf("host_%d", i)] = fmt.Sprintf("%s:%d", h, canaryPort)
		}
		u.deploy(t, "looper", "python3.11", map[string]string{"handler.py": pyLooper})
		tj, _ := json.Marshal(targets)
		counts := func() map[string]map[string]float64 {
			code, body := u.get("/fn/" + u.c.Namespace() + "/looper?start=" + url.QueryEscape(string(tj)))
			var got map[string]map[string]float64
			if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
				t.Fatalf("looper: %d %s", code, body)
			}
			return got
		}
		first := counts()
		id := containerIDs(t, podman, "looper")
		for i := range 5 {
			u.stop()
			extra := flags
			if i == 4 { // the last start checks only before container starts (the next subtest)
				extra = append(append([]string{}, flags...), "--confinement-check-interval", "1h")
			}
			u = startUp(outer, dataDir, listen, regAddr, extra...)
		}
		last := counts()
		if now := containerIDs(t, podman, "looper"); now != id {
			t.Fatalf("the looper's container changed across the restarts (%s → %s): it was not adopted", id, now)
		}
		t.Logf("connection attempts during the restarts: %v → %v", first, last)
		if last["gateway"]["attempts"]-first["gateway"]["attempts"] < 200 || last["outside"]["connected"] <= first["outside"]["connected"] {
			t.Errorf("the loop did not run through the restarts: %v → %v", first, last)
		}
		for k, v := range last {
			if k != "outside" && v["connected"] != 0 {
				t.Errorf("%s (%s) was reached %v times", k, targets[k], v["connected"])
			}
		}
		if n := canaryHits.Load(); n != 0 {
			t.Errorf("the host canary was reached %d times", n)
		}
		victimServes(t)
	})

	t.Run("a container start waits for the confinement", func(t *testing.T) {
		// This sless up checks only before container starts: nothing else would restore it.
		// Every jump goes (PREROUTING, FORWARD, INPUT: with any one left the deny chain still
		// holds). The first container to start is a dependency install, which is registered
		// nowhere (a function's start re-asserts the confinement when it registers its MAC): its
		// npm preinstall calls the host canary, which it reaches unless the start waited.
		removeJump(t)
		for _, l := range strings.Split(ourRules(), "\n") {
			if strings.HasPrefix(l, "-A FORWARD -s "+subnet.String()+" -j SLESS-") || strings.HasPrefix(l, "-A INPUT -s "+subnet.String()+" -j SLESS-") {
				testenv.MustRun(t, "iptables", append([]string{"-w", "-t", "mangle", "-D"}, strings.Fields(l)[1:]...)...)
			}
		}
		hits := canaryHits.Load()
		t.Cleanup(func() {
			if t.Failed() {
				l := u.LogWithout(`"msg":"request"`)
				t.Logf("sless up log (tail): %s", l[max(0, len(l)-6000):])
			}
		})
		// Dropped, a connect would wait minutes: the call gives up after 2 s.
		call := fmt.Sprintf("require('http').get('http://%s:%d/gated', {timeout: 2000}, r => r.resume()).on('timeout', function () { this.destroy() }).on('error', () => {})", fnGW, canaryPort)
		pkg, _ := json.Marshal(map[string]any{"name": "gated", "version": "1.0.0", "scripts": map[string]string{"preinstall": "node -e \"" + call + "\""}})
		u.deploy(t, "gated", "nodejs20", map[string]string{"handler.js": "exports.handle = async () => 'started'\n", "package.json": string(pkg)})
		if code, body := u.get("/fn/" + u.c.Namespace() + "/gated"); code != 200 || body != "started" {
			t.Fatalf("gated: %d %s", code, body)
		}
		if n := canaryHits.Load(); n != hits {
			t.Errorf("the dependency install started while the chain was missing: it reached the host canary %d times", n-hits)
		}
		if jump() == "" {
			t.Error("a container started while the jump was missing, and it is still missing")
		}
		if n := restoredMetric(t); n != 1 {
			t.Errorf("restores counted by this sless up: %d, want 1 (before the container start)", n)
		}
		victimServes(t)
	})

	if n := canaryHits.Load(); n != 0 {
		t.Errorf("the host canary was reached %d times", n)
	}
}

func randomTag() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// containerIDs is the ID of function fn's one running container.
func containerIDs(t *testing.T, podman *testenv.Podman, fn string) string {
	t.Helper()
	out := strings.Fields(string(mustOutput(t, podman.Command(context.Background(), "ps", "--filter", "label=sless.dev/function="+fn, "--format", "{{.ID}}"))))
	if len(out) != 1 {
		t.Fatalf("containers of %s: %v, want one", fn, out)
	}
	return out[0]
}

func containerIP(t *testing.T, podman *testenv.Podman, fn string) string {
	t.Helper()
	id := containerIDs(t, podman, fn)
	return strings.TrimSpace(string(mustOutput(t, podman.Command(context.Background(), "inspect", id, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"))))
}
