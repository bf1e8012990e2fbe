package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/k1n"
	"github.com/sless-dev/sless/internal/testenv"
)

// netProbe tries each target from inside a function (/fn/…?t=JSON, or a job's event "targets"):
// "tcp:HOST:PORT" (a connection), or
// "dns:HOST:PORT" (a DNS query for kubernetes.default.svc.cluster.local over UDP, answered or
// not). It answers "open"/"answered" or "blocked" per target, within 2 s each, all at once.
const netProbe = `import concurrent.futures, json, socket, struct
def tcp(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return 'open'
    except Exception:
        return 'blocked'
def dns(host, port):
    q = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0)
    for label in 'kubernetes.default.svc.cluster.local'.split('.'):
        q += bytes([len(label)]) + label.encode()
    q += b'\x00' + struct.pack('>HH', 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(q, (host, int(port)))
        data, _ = s.recvfrom(512)
        return 'answered' if data[:2] == q[:2] else 'blocked'
    except Exception:
        return 'blocked'
    finally:
        s.close()
def probe(t):
    kind, host, port = t.split(':')
    return tcp(host, port) if kind == 'tcp' else dns(host, port)
def handle(event):
    targets = event.get('targets') or json.loads(event['query']['t'][0])
    with concurrent.futures.ThreadPoolExecutor(len(targets)) as ex:
        return dict(zip(targets, ex.map(probe, targets.values())))
`

// jsNetProbe is netProbe for node.
const jsNetProbe = `const net = require('net'), dgram = require('dgram');
const tcp = (host, port) => new Promise((res) => {
  const s = net.connect({ host, port: Number(port), timeout: 2000 });
  s.on('connect', () => { s.destroy(); res('open'); });
  s.on('timeout', () => { s.destroy(); res('blocked'); });
  s.on('error', () => res('blocked'));
});
const dns = (host, port) => new Promise((res) => {
  const labels = 'kubernetes.default.svc.cluster.local'.split('.');
  const q = Buffer.concat([Buffer.from([0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
    ...labels.map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])), Buffer.from([0, 0, 1, 0, 1])]);
  const s = dgram.createSocket('udp4');
  const done = (v) => { try { s.close(); } catch (e) {} res(v); };
  const timer = setTimeout(() => done('blocked'), 2000);
  s.on('message', (m) => { clearTimeout(timer); done(m[0] === 0x12 && m[1] === 0x34 ? 'answered' : 'blocked'); });
  s.on('error', () => { clearTimeout(timer); done('blocked'); });
  s.send(q, Number(port), host);
});
exports.handle = async (event) => {
  const targets = event.targets || JSON.parse(event.query.t[0]);
  const keys = Object.keys(targets);
  const got = await Promise.all(keys.map((k) => { const [kind, host, port] = targets[k].split(':'); return kind === 'tcp' ? tcp(host, port) : dns(host, port); }));
  return Object.fromEntries(keys.map((k, i) => [k, got[i]]));
};
`

// The tenant NetworkPolicies, enforced by the cluster's kube-router: per rule, a connection the
// policy denies and one it allows, from inside a function pod.
func TestNetworkPoliciesEnforced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	victim, attacker := tenant(t, subject("np-victim")), tenant(t, subject("np-attacker"))
	v := deploy(t, victim, "app", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'victim'\n"})
	deploy(t, attacker, "probe", "python3.11", map[string]string{"handler.py": netProbe})
	deploy(t, attacker, "probejs", "nodejs20", map[string]string{"handler.js": jsNetProbe})

	podIP := func(ns string, labels client.MatchingLabels) string {
		var pods corev1.PodList
		cluster.Kube.List(ctx, &pods, client.InNamespace(ns), labels)
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				return p.Status.PodIP
			}
		}
		t.Fatalf("no pod %v in %s", labels, ns)
		return ""
	}
	victimIP := podIP(victim.Namespace(), client.MatchingLabels{"sless.dev/function": "app"})
	apiIP := podIP("sless-system", client.MatchingLabels{"app.kubernetes.io/name": "sless-api"})
	controllerIP := podIP("sless-system", client.MatchingLabels{"app.kubernetes.io/name": "sless-controller"})
	dnsIP := podIP("kube-system", client.MatchingLabels{"k8s-app": "kube-dns"})
	var dnsSvc corev1.Service
	if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &dnsSvc); err != nil {
		t.Fatal(err)
	}
	var apiSvc corev1.Service
	if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &apiSvc); err != nil {
		t.Fatal(err)
	}
	// A resolver of the attacker's choosing on port 53: the node address (a host-side server).
	rogue, err := net.ListenPacket("udp", k1n.NodeIP+":53")
	if err != nil {
		t.Fatalf("a stand-in resolver on %s:53: %v", k1n.NodeIP, err)
	}
	defer rogue.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := rogue.ReadFrom(buf)
			if err != nil {
				return
			}
			rogue.WriteTo(buf[:n], from) // an echo carries the id back: "answered"
		}
	}()
	hostPort := func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return p.Host
	}
	s3 := hostPort(cluster.S3Endpoint)
	api := hostPort(cluster.Endpoint)
	want := map[string]string{
		// allowed: DNS to the cluster DNS, by its Service and its pod
		"tcp:" + dnsIP + ":53":                 "open",
		"dns:" + dnsSvc.Spec.ClusterIP + ":53": "answered",
		"dns:" + dnsIP + ":53":                 "answered",
		"dns:" + k1n.NodeIP + ":53":            "blocked", // any other resolver
		"tcp:" + cluster.Registry:              "blocked", // the registry (the e2e's fault proxy)
		"tcp:" + cluster.RegistryDirect:        "blocked", // … itself
		fmt.Sprintf("tcp:%s:%d", cluster.Postgres.Host, cluster.Postgres.Port): "blocked", // the invocation history
		"tcp:" + s3:                                 "blocked", // S3
		"tcp:" + api:                                "blocked", // the API's NodePort
		"tcp:" + apiIP + ":8080":                    "blocked", // the API's pod
		"tcp:" + apiIP + ":9090":                    "blocked", // its load port
		"tcp:" + apiIP + ":9091":                    "blocked", // its metrics (every tenant's series)
		"tcp:" + controllerIP + ":8080":             "blocked", // the controller's health
		"tcp:" + controllerIP + ":9091":             "blocked", // the controller's metrics
		"tcp:" + controllerIP + ":3128":             "blocked", // the index proxy: deps pods only
		"tcp:" + apiSvc.Spec.ClusterIP + ":443":     "blocked", // the Kubernetes API
		fmt.Sprintf("tcp:%s:%d", k1n.NodeIP, 6443):  "blocked", // … on the node
		fmt.Sprintf("tcp:%s:%d", k1n.NodeIP, 10250): "blocked", // the kubelet
		"tcp:" + victimIP + ":8080":                 "blocked", // another tenant's pod
	}
	targets := map[string]string{}
	for k := range want {
		targets[k] = k
	}
	tj, _ := json.Marshal(targets)
	for _, fn := range []string{"probe", "probejs"} {
		code, body := get(cluster.Endpoint + "/fn/" + attacker.Namespace() + "/" + fn + "?t=" + url.QueryEscape(string(tj)))
		var got map[string]string
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", fn, code, body)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("from a function pod (%s), %s: %s, want %s", fn, k, got[k], w)
			}
		}
	}

	// A fork bomb is held by the pod's pids limit (the kubelet's podPidsLimit); the neighbour
	// serves on.
	t.Run("fork bomb", func(t *testing.T) {
		bomb := "import os\ndef handle(event):\n    n = 0\n    try:\n        while n < 5000:\n            os.posix_spawn('/bin/sleep', ['sleep', '30'], {})\n            n += 1\n    except OSError:\n        pass\n    return n\n"
		deploy(t, attacker, "bomb", "python3.11", map[string]string{"handler.py": bomb})
		code, body := get(cluster.Endpoint + "/fn/" + attacker.Namespace() + "/bomb")
		var n int
		if err := json.Unmarshal([]byte(body), &n); code != 200 || err != nil || n >= 256 {
			t.Errorf("fork bomb: %d %s, want fewer than 256 processes (podPidsLimit)", code, body)
		}
		if code, body := get(v.Status.URL); code != 200 || !strings.Contains(body, "victim") {
			t.Errorf("the victim during the fork bomb: %d %s", code, body)
		}
		t.Logf("fork bomb stopped at %d processes", n)
	})
	// Allowed: ingress from the operator's namespace (/fn/) to the victim.
	if code, body := get(v.Status.URL); code != 200 || !strings.Contains(body, "victim") {
		t.Errorf("/fn/ to the victim: %d %s", code, body)
	}

	t.Run("from a job", func(t *testing.T) {
		ev, _ := json.Marshal(map[string]any{"targets": targets})
		if _, err := attacker.CreateJob(ctx, apiv1.Job{Name: "probe", FunctionRef: "probe", EventJSON: string(ev), RunID: 1}); err != nil {
			t.Fatal(err)
		}
		var j *apiv1.Job
		waitFor(t, "the probe job", 2*time.Minute, func() bool {
			j, _ = attacker.GetJob(ctx, "probe")
			return j != nil && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed)
		})
		var got map[string]string
		if err := json.Unmarshal([]byte(j.Status.Message), &got); j.Status.Phase != apiv1.JobSucceeded || err != nil {
			t.Fatalf("job %+v", j.Status)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("from a job pod, %s: %s, want %s", k, got[k], w)
			}
		}
	})

	// A dependency install (npm preinstall, tenant-scoped so scripts run): only the index proxy,
	// which serves the configured registry and nothing else.
	t.Run("from a dependency install", func(t *testing.T) {
		probes := map[string]string{
			"s3": cluster.S3Endpoint + "/", "api_nodeport": cluster.Endpoint + "/healthz",
			"operator_pod": "http://" + apiIP + ":8080/healthz", "victim_pod": "http://" + victimIP + ":8080/",
			"kubelet": "http://" + k1n.NodeIP + ":10250/", "npm_direct": cluster.NPM.URL + "/leftpad-sless",
		}
		pkg := testenv.DepsAttackPackage(probes, nil, cluster.NPMSecret, cluster.NPM.URL+"/leftpad-sless", cluster.S3Endpoint+"/")
		f := deployUntil(t, attacker, "jsdeps", "nodejs20", map[string]string{"handler.js": "exports.handle = async () => 1\n", "package.json": pkg}, apiv1.PhaseFailed)
		checkInstall(t, f, probes, true)
	})
	t.Run("from a setup.py (pip)", func(t *testing.T) {
		probes := map[string]string{
			"s3": cluster.S3Endpoint + "/", "api_nodeport": cluster.Endpoint + "/healthz",
			"operator_pod": "http://" + apiIP + ":8080/healthz", "victim_pod": "http://" + victimIP + ":8080/",
			"kubelet": "http://" + k1n.NodeIP + ":10250/", "pip_direct": cluster.PIP.URL + "/evil/",
		}
		file, data := testenv.PipAttackSdist(probes, cluster.NPMSecret, cluster.PIP.URL+"/evil/", cluster.S3Endpoint+"/")
		cluster.PIP.Add("evil", file, data)
		f := deployUntil(t, attacker, "pydeps", "python3.11", map[string]string{"handler.py": "def handle(e):\n    return 1\n", "requirements.txt": "evil==1.0\n"}, apiv1.PhaseFailed)
		checkInstall(t, f, probes, false)
	})
}

// checkInstall reads a failed install's ATTACK line: every probe unreachable, the credential
// found nowhere, the index proxy serving the configured index (which wants the credential the
// proxy adds) and refusing another host; writes (the npm attack's) refused with 405.
func checkInstall(t *testing.T, f *apiv1.Function, probes map[string]string, writes bool) {
	t.Helper()
	got, err := testenv.DepsAttackResult(f.Status.Message)
	if err != nil {
		t.Fatal(err)
	}
	for k := range probes {
		if got[k] != "unreachable" {
			t.Errorf("from a deps pod, %s (%s): %v, want unreachable", k, probes[k], got[k])
		}
	}
	if leaks, _ := got["leaks"].([]any); len(leaks) != 0 {
		t.Errorf("the installer found the index credential in %v", leaks)
	}
	if strings.Contains(f.Status.Message, cluster.NPMSecret) {
		t.Error("the status shows the index credential")
	}
	// 200 only with the credential, which the proxy adds.
	if got["proxy_registry"] != float64(200) || got["proxy_other"] != float64(403) {
		t.Errorf("through the index proxy: the registry %v (want 200), another host %v (want 403)", got["proxy_registry"], got["proxy_other"])
	}
	// The npm attack also tries to write through it (the pip one does not): refused, not forwarded.
	for _, m := range []string{"put", "post", "delete", "trace"} {
		if v, ok := got["proxy_"+m]; (writes || ok) && v != float64(405) {
			t.Errorf("%s through the index proxy: %v, want 405", strings.ToUpper(m), v)
		}
	}
}
