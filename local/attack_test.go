package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// pyProbe and jsProbe fetch every target of the event (a job's "targets", or /fn/'s ?t=JSON) and
// answer the HTTP status each gave, or "unreachable" when none came within 1.5 s.
const pyProbe = `import concurrent.futures, json, urllib.request, urllib.error
def probe(url):
    try:
        return urllib.request.urlopen(url, timeout=1.5).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 'unreachable'
def handle(event):
    targets = event.get('targets') or json.loads(event['query']['t'][0])
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as ex:
        return dict(zip(targets, ex.map(probe, targets.values())))
`

const jsProbe = `const http = require('http');
const probe = (url) => new Promise((res) => {
  const req = http.get(url, { timeout: 1500 }, (r) => { r.resume(); res(r.statusCode); });
  req.on('timeout', () => { req.destroy(); res('unreachable'); });
  req.on('error', () => res('unreachable'));
});
exports.handle = async (event) => {
  const targets = event.targets || JSON.parse(event.query.t[0]);
  const keys = Object.keys(targets);
  const got = await Promise.all(keys.map((k) => probe(targets[k])));
  return Object.fromEntries(keys.map((k, i) => [k, got[i]]));
};
`

// pyProbe6 connects to every IPv6 "addr%zone:port" of ?t=JSON and answers "reached" or
// "unreachable: …" for each, and its own /proc/net/if_inet6 (empty: IPv6 is off in it).
const pyProbe6 = `import json, socket
def probe(hp):
    host, port = hp.rsplit(':', 1)
    addr, _, zone = host.partition('%')
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.settimeout(1.5)
        s.connect((addr, int(port), 0, socket.if_nametoindex(zone) if zone else 0))
        s.close()
        return 'reached'
    except Exception as e:
        return 'unreachable: ' + type(e).__name__
def handle(event):
    out = {k: probe(v) for k, v in json.loads(event['query']['t'][0]).items()}
    out['if_inet6'] = open('/proc/net/if_inet6').read()
    return out
`

// v6Targets are the IPv6 ways to the host canary and the victim an attacker in a container of
// the instance tries: the bridges' link-local addresses (from their MACs, whether configured or
// not), the victim's, and the host's global addresses.
func v6Targets(t *testing.T, subnet netip.Prefix, victimMAC string, canaryPort int) map[string]string {
	t.Helper()
	targets := map[string]string{"victim_link_local": testenv.LinkLocal(t, victimMAC) + "%eth0:8080"}
	fnGW, depsGW := subnet.Addr().Next(), subnet.Addr()
	for range 129 {
		depsGW = depsGW.Next()
	}
	for name, gw := range map[string]netip.Addr{"bridge": fnGW, "deps_bridge": depsGW} {
		g := gw.As4()
		mac := fmt.Sprintf("02:5e:%02x:%02x:%02x:%02x", g[0], g[1], g[2], g[3]) // network.Net's
		targets[name+"_link_local"] = fmt.Sprintf("%s%%eth0:%d", testenv.LinkLocal(t, mac), canaryPort)
	}
	out, err := exec.Command("ip", "-6", "-o", "addr", "show", "scope", "global").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			if p, err := netip.ParsePrefix(f[3]); err == nil {
				targets[fmt.Sprintf("host_v6_%d", i)] = fmt.Sprintf("%s:%d", p.Addr(), canaryPort)
			}
		}
	}
	return targets
}

// TestContainment runs the attacks of a tenant's code on the single host: from a python and a
// node function, from a job and from a dependency install. Every attempt on the host, another
// tenant or the metadata stand-in fails; the outside stays reachable.
func TestContainment(t *testing.T) {
	outside := testenv.StartOutside(t)
	// The canary: a host service on every address, IPv4 and IPv6 ([::], as Go, sshd and a
	// kubelet listen).
	canaryLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	var canaryHits atomic.Int64
	go http.Serve(canaryLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { canaryHits.Add(1) }))
	t.Cleanup(func() { canaryLn.Close() })
	canaryPort := canaryLn.Addr().(*net.TCPAddr).Port

	// A package registry on the host's loopback that wants a credential only sless up holds.
	const secret = "TOPSECRET-index-credential"
	var registryAuthed atomic.Int64
	var registryMu sync.Mutex
	var registryMethods []string // of the requests that carried the credential
	reg := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == "ci" && p == secret {
			registryMu.Lock()
			registryMethods = append(registryMethods, r.Method)
			registryMu.Unlock()
			registryAuthed.Add(1)
			fmt.Fprint(w, "{}")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})}
	regLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go reg.Serve(regLn)
	t.Cleanup(func() { reg.Close() })
	npmRegistry := "http://ci:" + secret + "@" + regLn.Addr().String() + "/"

	// A pip index, credentialed the same way, serving one sdist whose setup.py attacks (added once
	// the targets are known).
	pipIndex, err := testenv.StartPipIndex("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pipIndex.Close)
	pipWithCreds := pipIndex.RequireBasicAuth("ci", secret)

	u := startUpWith(t, "--npm-registry", npmRegistry, "--pip-index-url", pipWithCreds)
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(u.dataDir, "cni", "subnet"))
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix(strings.TrimSpace(string(b)))
	fnGW, depsGW := subnet.Addr().Next(), subnet.Addr()
	for range 129 {
		depsGW = depsGW.Next()
	}
	if !strings.HasPrefix(subnet.String(), "10.89.") {
		t.Errorf("the instance's subnet is %s, want one of 10.89.0.0/16", subnet)
	}

	// The victim: another tenant's function.
	victim, before := deployVictim(t, u)
	podman := testenv.NewPodman(t)
	vname := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "--filter", "label=sless.dev/namespace="+victim.Namespace(), "--format", "{{.Names}}"))))
	victimIP := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", vname, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"))))
	victimMAC := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", vname, "--format", "{{range .NetworkSettings.Networks}}{{.MacAddress}}{{end}}"))))
	targets6 := v6Targets(t, subnet, victimMAC, canaryPort)
	t6, _ := json.Marshal(targets6)
	check6 := func(t *testing.T, what string, got map[string]any) {
		t.Helper()
		for k := range targets6 {
			if v, _ := got[k].(string); !strings.HasPrefix(v, "unreachable") {
				t.Errorf("%s → %s over IPv6 (%s): %v, want unreachable", what, k, targets6[k], got[k])
			}
		}
		if got["if_inet6"] != "" {
			t.Errorf("%s has IPv6 addresses: %q", what, got["if_inet6"])
		}
	}

	_, apiPort, _ := net.SplitHostPort(u.Listen)
	_, regPort, _ := net.SplitHostPort(u.RegAddr)
	targets := map[string]string{
		"canary_gateway":   fmt.Sprintf("http://%s:%d/", fnGW, canaryPort),
		"canary_deps_gw":   fmt.Sprintf("http://%s:%d/", depsGW, canaryPort),
		"canary_loopback":  fmt.Sprintf("http://127.0.0.1:%d/", canaryPort),
		"api_gateway":      fmt.Sprintf("http://%s:%s/healthz", fnGW, apiPort),
		"registry_gateway": fmt.Sprintf("http://%s:%s/v2/", fnGW, regPort),
		"victim_direct":    "http://" + victimIP + ":8080/",
		"metadata":         outside.MetadataURL + "/",
		"outside":          outside.URL + "/",
	}
	for i, ip := range hostAddresses(t, subnet) {
		targets[fmt.Sprintf("canary_host_%d", i)] = fmt.Sprintf("http://%s:%d/", ip, canaryPort)
	}
	tj, _ := json.Marshal(targets)
	check := func(t *testing.T, what string, got map[string]any) {
		t.Helper()
		if len(got) != len(targets) {
			t.Fatalf("%s: %v", what, got)
		}
		for k, v := range got {
			want := any("unreachable")
			if k == "outside" {
				want = float64(200)
			}
			if v != want {
				t.Errorf("%s → %s (%s): %v, want %v", what, k, targets[k], v, want)
			}
		}
	}

	for _, rt := range []struct{ name, runtime, file, code string }{
		{"pyprobe", "python3.11", "handler.py", pyProbe}, {"jsprobe", "nodejs20", "handler.js", jsProbe},
	} {
		t.Run("from a "+rt.runtime+" function", func(t *testing.T) {
			u.deploy(t, rt.name, rt.runtime, map[string]string{rt.file: rt.code})
			code, body := u.get("/fn/" + u.c.Namespace() + "/" + rt.name + "?t=" + url.QueryEscape(string(tj)))
			var got map[string]any
			if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
				t.Fatalf("%d %s", code, body)
			}
			check(t, rt.runtime+" function", got)
		})
	}
	t.Run("over IPv6 from a function", func(t *testing.T) {
		u.deploy(t, "v6probe", "python3.11", map[string]string{"handler.py": pyProbe6})
		code, body := u.get("/fn/" + u.c.Namespace() + "/v6probe?t=" + url.QueryEscape(string(t6)))
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%d %s", code, body)
		}
		check6(t, "a function", got)
		// node's server listens on :: (no HOST): with IPv6 off it still serves (IPv4 through the
		// dual-stack socket), as the node probe above did.
		js := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "--filter", "label=sless.dev/function=jsprobe", "--format", "{{.Names}}"))))
		if tcp6 := string(mustOutput(t, podman.Command(ctx, "exec", js, "cat", "/proc/net/tcp6"))); !strings.Contains(tcp6, ":1F90 00000000000000000000000000000000:0000 0A") {
			t.Errorf("the node function's server is not on [::]:8080:\n%s", tcp6)
		}
	})

	t.Run("from a job", func(t *testing.T) {
		ev, _ := json.Marshal(map[string]any{"targets": targets})
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "probe", FunctionRef: "pyprobe", EventJSON: string(ev), RunID: 1}); err != nil {
			t.Fatal(err)
		}
		j := waitJob(t, u, "probe", 1)
		var got map[string]any
		if err := json.Unmarshal([]byte(j.Status.Message), &got); j.Status.Phase != apiv1.JobSucceeded || err != nil {
			t.Fatalf("job %+v", j.Status)
		}
		check(t, "job", got)
	})

	probes := map[string]string{}
	for k, v := range targets {
		probes[k] = v
	}
	delete(probes, "outside") // installs reach nothing but the proxy
	probes["outside_direct"] = outside.URL + "/"
	checkInstall := func(t *testing.T, f *apiv1.Function, authed func() int64) {
		t.Helper()
		got, err := testenv.DepsAttackResult(f.Status.Message)
		if f.Status.Phase != apiv1.PhaseFailed || err != nil {
			t.Fatalf("status %+v: %v", f.Status, err)
		}
		if leaks, _ := got["leaks"].([]any); len(leaks) != 0 {
			t.Errorf("the installer found the index credential in %v", leaks)
		}
		for k := range probes {
			if got[k] != "unreachable" {
				t.Errorf("install → %s (%s): %v, want unreachable", k, probes[k], got[k])
			}
		}
		// The proxy reaches the configured index with the credential it adds, and nothing else.
		if got["proxy_registry"] != float64(200) || authed() == 0 {
			t.Errorf("the index through the index proxy: %v (authenticated requests: %d)", got["proxy_registry"], authed())
		}
		if got["proxy_other"] != float64(403) {
			t.Errorf("another host through the index proxy: %v, want 403", got["proxy_other"])
		}
		if strings.Contains(f.Status.Message, secret) {
			t.Error("the status shows the index credential")
		}
	}

	t.Run("from a setup.py (pip)", func(t *testing.T) {
		file, data := testenv.PipAttackSdist(probes, secret, pipIndex.URL+"/evil/", fmt.Sprintf("http://127.0.0.1:%d/", canaryPort))
		pipIndex.Add("evil", file, data)
		f := u.deploy(t, "pydeps", "python3.11", map[string]string{"handler.py": "def handle(e):\n    return 1\n", "requirements.txt": "evil==1.0\n"})
		checkInstall(t, f, pipIndex.Lookups.Load) // counted only once authenticated
	})

	t.Run("from a dependency install", func(t *testing.T) {
		pkg := testenv.DepsAttackPackage(probes, targets6, secret, "http://"+regLn.Addr().String()+"/", fmt.Sprintf("http://127.0.0.1:%d/", canaryPort))
		f := u.deploy(t, "jsdeps", "nodejs20", map[string]string{"handler.js": "exports.handle = async () => 1\n", "package.json": pkg})
		checkInstall(t, f, registryAuthed.Load)
		got, _ := testenv.DepsAttackResult(f.Status.Message)
		v6 := map[string]any{"if_inet6": got["if_inet6"]}
		for k := range targets6 {
			v6[k] = got["v6_"+k]
		}
		check6(t, "an install", v6)
		// The proxy lends its credential to reads only: a write is 405 and never reaches the registry.
		for _, m := range []string{"put", "post", "delete", "trace"} {
			if got["proxy_"+m] != float64(http.StatusMethodNotAllowed) {
				t.Errorf("%s through the index proxy: %v, want 405", strings.ToUpper(m), got["proxy_"+m])
			}
		}
		registryMu.Lock()
		defer registryMu.Unlock()
		for _, m := range registryMethods {
			if m != "GET" && m != "HEAD" {
				t.Errorf("the registry got a %s (with the index credential)", m)
			}
		}
	})

	// Each tenant's processes run as host users of its own range: one tenant's count against no
	// other's nproc. A fork bomb is held by the container's pids limit; the neighbour serves on.
	t.Run("tenants run as host users of their own", func(t *testing.T) {
		hostUID := func(container string) int {
			pid := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", container, "--format", "{{.State.Pid}}"))))
			b, err := os.ReadFile("/proc/" + pid + "/status")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
					var uid int
					fmt.Sscan(f[1], &uid)
					return uid
				}
			}
			t.Fatalf("no Uid in /proc/%s/status", pid)
			return 0
		}
		attacker := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "--filter", "label=sless.dev/function=pyprobe", "--format", "{{.Names}}"))))
		va, aa := hostUID(vname), hostUID(attacker)
		if va == aa || va < 1<<24 || aa < 1<<24 || va%65536 != 65532 || aa%65536 != 65532 {
			t.Errorf("host uids: victim %d, attacker %d; want distinct ranges above %d, user 65532 in each", va, aa, 1<<24)
		}
		// Small processes (sleep), so the pids limit and not the memory limit ends it.
		bomb := "import os\ndef handle(event):\n    n = 0\n    try:\n        while n < 5000:\n            os.posix_spawn('/bin/sleep', ['sleep', '30'], {})\n            n += 1\n    except OSError:\n        pass\n    return n\n"
		u.deploy(t, "bomb", "python3.11", map[string]string{"handler.py": bomb})
		code, body := u.get("/fn/" + u.c.Namespace() + "/bomb")
		var n int
		if err := json.Unmarshal([]byte(body), &n); code != 200 || err != nil || n >= 256 {
			t.Errorf("fork bomb: %d %s, want fewer than 256 processes", code, body)
		}
		if code, body := u.get("/fn/" + victim.Namespace() + "/v"); code != 200 || body != "victim" {
			t.Errorf("the victim during the fork bomb: %d %s", code, body)
		}
		t.Logf("fork bomb stopped at %d processes; victim host uid %d, attacker %d", n, va, aa)
	})

	if n := canaryHits.Load(); n != 0 {
		t.Errorf("the host canary was reached %d times", n)
	}
	after, _ := victim.GetFunction(ctx, "v")
	if after.Status.Image != before.Status.Image {
		t.Errorf("the victim's image changed")
	}
	if code, body := (&up{SlessUp: u.SlessUp}).get("/fn/" + victim.Namespace() + "/v"); code != 200 || body != "victim" {
		t.Errorf("the victim answers %d %s", code, body)
	}
}

// deployVictim deploys function v, answering "victim", in another tenant's namespace and waits
// until it is Ready: what the attacks must leave serving the same image.
func deployVictim(t *testing.T, u *up) (*client.Client, *apiv1.Function) {
	t.Helper()
	ctx := context.Background()
	victim := otherTenant(t, u, "victim@example.com")
	if _, err := victim.CreateFunction(ctx, apiv1.Function{Name: "v", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	z := testenv.Zip(map[string]string{"handler.py": "def handle(e):\n    return 'victim'\n"})
	if _, err := victim.Upload(ctx, "v", strings.NewReader(string(z)), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	var f *apiv1.Function
	waitFor(t, 60*time.Second, func() bool {
		f, _ = victim.GetFunction(ctx, "v")
		return f != nil && f.Status.Phase == apiv1.PhaseReady
	}, "the victim Ready")
	return victim, f
}

// hostAddresses are the host's own IPv4 addresses outside the instance's subnet (the node's
// address, other bridges'): a service on 0.0.0.0 listens on each.
func hostAddresses(t *testing.T, own netip.Prefix) []netip.Addr {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "scope", "global").Output()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.Addr
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		p, err := netip.ParsePrefix(f[3])
		if err == nil && !own.Contains(p.Addr()) {
			addrs = append(addrs, p.Addr())
		}
	}
	return addrs
}
