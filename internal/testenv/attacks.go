package testenv

import (
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
const http = require('http'), fs = require('fs'), path = require('path');
const t = require('./package.json').targets;
const probe = (url) => new Promise((res) => {
  const req = http.get(url, { timeout: 1500 }, (r) => { r.resume(); res(r.statusCode); });
  req.on('timeout', () => { req.destroy(); res('unreachable'); });
  req.on('error', () => res('unreachable'));
});
const viaProxy = (url) => new Promise((res) => {
  const p = new URL(process.env.HTTP_PROXY);
  const req = http.get({ host: p.hostname, port: p.port, path: url, timeout: 1500 }, (r) => { r.resume(); res(r.statusCode); });
  req.on('timeout', () => { req.destroy(); res('unreachable'); });
  req.on('error', () => res('unreachable'));
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
  console.log('ATTACK ' + JSON.stringify(out));
  process.exit(1);
})();
`

// DepsAttackPackage is a package.json whose preinstall script is the dependency-install attack:
// probes (name → URL) must all be unreachable, registry is a URL the index proxy serves, other one
// it refuses, and secret the index credential the installer must not find (it is stored in
// halves: package.json itself must not hold it).
func DepsAttackPackage(probes map[string]string, secret, registry, other string) string {
	b, _ := json.Marshal(map[string]any{
		"name": "attack", "version": "1.0.0",
		"scripts": map[string]string{"preinstall": "node -e \"eval(require('./package.json').attack)\""},
		"attack":  depsAttack,
		"targets": map[string]any{"probe": probes, "secret": []string{secret[:len(secret)/2], secret[len(secret)/2:]}, "registry": registry, "other": other},
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
