package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Outside is "the outside world" for containment tests, on this machine only: a network
// namespace joined to the host by a veth pair (198.18.N.0/30, the benchmarking range), with an
// HTTP server on its address, and a stand-in for the link-local metadata address (169.254.77.77,
// never the real 169.254.169.254) served in it too and routed to it.
type Outside struct {
	URL, MetadataURL string
	ns, hostIP       string
}

// RouteBack routes replies to prefix (a network whose traffic reaches the outside unmasqueraded,
// as a test cluster's pods') back through the host.
func (o *Outside) RouteBack(t testing.TB, prefix string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", o.ns, "route", "replace", prefix, "via", o.hostIP).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s route replace %s: %v: %s", o.ns, prefix, err, out)
	}
}

// StartOutside creates the namespace and its servers for the test's lifetime. It needs root and
// the ip tool; it fails the test (or skips, outside SLESS_REQUIRE_REAL) when it cannot.
func StartOutside(t testing.TB) *Outside {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		Missing(t, "the ip tool (iproute2)", err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	ns, host, peer := "slo-"+tag, "slo"+tag+"h", "slo"+tag+"p"
	n := int(b[0])
	hostIP, nsIP := fmt.Sprintf("198.18.%d.1", n), fmt.Sprintf("198.18.%d.2", n)
	const metadata = "169.254.77.77"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			Missing(t, "a test network namespace (ip "+strings.Join(args, " ")+")", fmt.Errorf("%v: %s", err, out))
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "route", "del", metadata+"/32").Run()
		exec.Command("ip", "link", "del", host).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run("netns", "add", ns)
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", ns)
	run("addr", "add", hostIP+"/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", ns, "addr", "add", nsIP+"/30", "dev", peer)
	run("-n", ns, "addr", "add", metadata+"/32", "dev", peer)
	run("-n", ns, "link", "set", peer, "up")
	run("-n", ns, "link", "set", "lo", "up")
	// No default route in it: what reaches it comes from the host's end (masqueraded), and
	// http.server's reverse lookup of its address fails at once instead of timing out.
	// replace, not add: a run killed before its cleanup leaves the route, which would fail every later run.
	run("route", "replace", metadata+"/32", "via", nsIP)
	var serverLogs []*LockedBuffer
	o := &Outside{URL: "http://" + nsIP + ":8000", MetadataURL: "http://" + metadata + ":8000", ns: ns, hostIP: hostIP}
	for _, addr := range []string{nsIP, metadata} {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "python3", "-m", "http.server", "--bind", addr, "8000", "--directory", t.TempDir())
		var logs LockedBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		serverLogs = append(serverLogs, &logs)
		if err := cmd.Start(); err != nil {
			cancel()
			Missing(t, "python3 in a test network namespace", err)
		}
		t.Cleanup(func() { cancel(); cmd.Wait() })
	}
	c := &http.Client{Timeout: time.Second}
	for _, u := range []string{o.URL, o.MetadataURL} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := c.Get(u + "/")
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the outside server %s did not answer: %v\n%s\n%s", u, err, serverLogs[0].String(), serverLogs[1].String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return o
}
