package testenv

import (
	"encoding/json"
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
