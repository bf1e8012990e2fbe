package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
)

// Secrets are written whole and never read back: PUT creates (201) or replaces (200) and moves the
// version; GET and the list answer names, keys and versions; no answer of any route carries a
// value; bad data is a 400 naming the key, never the value, and stores nothing; a function refers
// to secrets by name (checked as env names and directories, not for existence); a secret in use
// cannot be deleted (409); another tenant sees none of it; a namespace holds at most
// apiv1.MaxSecrets.
func testSecrets(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	ns := "/v1/namespaces/" + e.NS
	const canary = "CANARY-secret-value-6f1e"
	var bodies []string
	do := func(method, path string, body any) (int, string, []byte) {
		t.Helper()
		var raw []byte
		switch b := body.(type) {
		case nil:
		case string:
			raw = []byte(b)
		default:
			raw, _ = json.Marshal(b)
		}
		status, code, out := e.Raw(method, ns+path, e.Token, "application/json", raw)
		bodies = append(bodies, string(out))
		return status, code, out
	}
	put := func(name string, data map[string]string) apiv1.Secret {
		t.Helper()
		status, _, out := do(http.MethodPut, "/secrets/"+name, apiv1.SecretPut{Data: data})
		if status != http.StatusCreated && status != http.StatusOK {
			t.Fatalf("PUT secret %s: %d %s", name, status, out)
		}
		var s apiv1.Secret
		json.Unmarshal(out, &s)
		return s
	}

	status, _, out := do(http.MethodPut, "/secrets/db", apiv1.SecretPut{Data: map[string]string{"url": canary, "USER": "app"}})
	var s apiv1.Secret
	json.Unmarshal(out, &s)
	if status != http.StatusCreated || s.Name != "db" || s.Version != 1 || strings.Join(s.Keys, ",") != "USER,url" || s.UpdatedAt == nil {
		t.Fatalf("create: %d %s", status, out)
	}
	status, _, out = do(http.MethodPut, "/secrets/db", apiv1.SecretPut{Data: map[string]string{"url": canary + "-2"}})
	json.Unmarshal(out, &s)
	if status != http.StatusOK || s.Version != 2 || strings.Join(s.Keys, ",") != "url" {
		t.Fatalf("replace: %d %s", status, out)
	}
	if status, _, out = do(http.MethodGet, "/secrets/db", nil); status != http.StatusOK || !strings.Contains(string(out), `"version":2`) {
		t.Fatalf("get: %d %s", status, out)
	}
	put("tls", map[string]string{"cert": canary + "-cert", "key": canary + "-key"})
	status, _, out = do(http.MethodGet, "/secrets", nil)
	var l apiv1.List[apiv1.Secret]
	json.Unmarshal(out, &l)
	if status != http.StatusOK || len(l.Items) != 2 || l.Items[0].Name != "db" || l.Items[1].Name != "tls" {
		t.Fatalf("list: %d %s", status, out)
	}
	if status, code, _ := do(http.MethodGet, "/secrets/nope", nil); status != http.StatusNotFound || code != apiv1.CodeNotFound {
		t.Fatalf("get of a missing secret: %d %s", status, code)
	}

	// Bad data: 400 naming what is wrong, never the value; the stored secret is unchanged.
	for _, tc := range []struct {
		name, path string
		body       any
		want       string
	}{
		{"bad name", "/secrets/Bad_Name", apiv1.SecretPut{Data: map[string]string{"a": "b"}}, "secret name"},
		{"no data", "/secrets/db", apiv1.SecretPut{}, "at least one key"},
		{"bad key", "/secrets/db", apiv1.SecretPut{Data: map[string]string{"bad-key": canary}}, "bad-key"},
		{"NUL", "/secrets/db", apiv1.SecretPut{Data: map[string]string{"url": canary + "\x00"}}, "NUL"},
		{"value too big", "/secrets/db", apiv1.SecretPut{Data: map[string]string{"url": strings.Repeat("x", apiv1.MaxSecretValueBytes+1)}}, "at most"},
		{"too many keys", "/secrets/db", apiv1.SecretPut{Data: manyKeys(apiv1.MaxSecretKeys + 1)}, "keys in data"},
		{"unknown field", "/secrets/db", `{"data":{"url":"x"},"values":{}}`, "body must be"},
		{"not JSON", "/secrets/db", `{"data":` + canary, "body must be"},
	} {
		status, code, out := do(http.MethodPut, tc.path, tc.body)
		if status != http.StatusBadRequest || code != apiv1.CodeInvalidArgument || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %d %s %s (want 400 mentioning %q)", tc.name, status, code, out, tc.want)
		}
	}
	// A secret of more than 1 MiB in all: 400 (or 413 for the body), never stored.
	big := map[string]string{}
	for i := range 17 {
		big[fmt.Sprintf("K%d", i)] = strings.Repeat("v", apiv1.MaxSecretValueBytes-8)
	}
	if status, _, out := do(http.MethodPut, "/secrets/huge", apiv1.SecretPut{Data: big}); status != http.StatusBadRequest {
		t.Errorf("a secret over 1 MiB: %d %.200s", status, out)
	}
	if status, _, out := do(http.MethodPut, "/secrets/huge", `{"data":{"a":"`+strings.Repeat("\\u0041", 2<<20)+`"}}`); status != http.StatusRequestEntityTooLarge {
		t.Errorf("an 12 MiB body: %d %.200s", status, out)
	}
	if status, _, _ := do(http.MethodGet, "/secrets/huge", nil); status != http.StatusNotFound {
		t.Errorf("a refused secret was stored: %d", status)
	}
	if m, err := e.C.GetSecret(context.Background(), "db"); err != nil || m.Version != 2 {
		t.Fatalf("refused writes changed the secret: %+v %v", m, err)
	}

	// References: checked for form, not for existence.
	fn := func(name string, env, files map[string]string, extra map[string]string) (int, []byte) {
		st, _, out := do(http.MethodPost, "/functions", apiv1.Function{Name: name, Runtime: "python3.11", EnvVars: extra, SecretEnv: env, SecretFiles: files})
		return st, out
	}
	for _, tc := range []struct {
		name         string
		env, files   map[string]string
		envVars      map[string]string
		wantInStatus string
	}{
		{"ref without key", map[string]string{"DB": "db"}, nil, nil, "SECRET/KEY"},
		{"bad secret name", map[string]string{"DB": "Db/url"}, nil, nil, "SECRET/KEY"},
		{"reserved name", map[string]string{"PORT": "db/url"}, nil, nil, "set by the platform"},
		{"private prefix", map[string]string{"SLESS_X": "db/url"}, nil, nil, "set by the platform"},
		{"in env_vars too", map[string]string{"DB": "db/url"}, nil, map[string]string{"DB": "x"}, "both env_vars and secret_env"},
		{"path outside", nil, map[string]string{"/etc/tls": "tls"}, nil, "/var/run/secrets/"},
		{"path traversal", nil, map[string]string{"/var/run/secrets/../../etc": "tls"}, nil, "/var/run/secrets/"},
		{"kubernetes' own", nil, map[string]string{"/var/run/secrets/kubernetes.io/serviceaccount": "tls"}, nil, "Kubernetes' own"},
		{"nested", nil, map[string]string{"/var/run/secrets/a": "tls", "/var/run/secrets/a/b": "db"}, nil, "inside"},
	} {
		if st, out := fn("bad", tc.env, tc.files, tc.envVars); st != http.StatusBadRequest || !strings.Contains(string(out), tc.wantInStatus) {
			t.Errorf("%s: %d %s (want 400 mentioning %q)", tc.name, st, out, tc.wantInStatus)
		}
	}
	if st, out := fn("uses", map[string]string{"DB_URL": "db/url"}, map[string]string{"/var/run/secrets/tls": "tls"}, nil); st != http.StatusCreated {
		t.Fatalf("function with secrets: %d %s", st, out)
	}
	f, err := e.C.GetFunction(context.Background(), "uses")
	if err != nil || f.SecretEnv["DB_URL"] != "db/url" || f.SecretFiles["/var/run/secrets/tls"] != "tls" {
		t.Fatalf("the function's references: %+v %v", f, err)
	}
	// A function may be declared before its secret.
	if st, out := fn("early", map[string]string{"X": "later/k"}, nil, nil); st != http.StatusCreated {
		t.Fatalf("a reference to a secret not yet written: %d %s", st, out)
	}

	// In use: 409 naming the function; free again once no function refers to it.
	if status, code, out := do(http.MethodDelete, "/secrets/db", nil); status != http.StatusConflict || !strings.Contains(string(out), "uses") {
		t.Fatalf("delete of a secret in use: %d %s %s", status, code, out)
	}
	if status, _, out := do(http.MethodPut, "/functions/uses", apiv1.Function{Name: "uses", Runtime: "python3.11",
		SecretFiles: map[string]string{"/var/run/secrets/tls": "tls"}}); status != http.StatusOK {
		t.Fatalf("dropping the reference: %d %s", status, out)
	}
	if status, _, out := do(http.MethodDelete, "/secrets/db", nil); status != http.StatusNoContent {
		t.Fatalf("delete of a secret no longer used: %d %s", status, out)
	}
	if status, _, _ := do(http.MethodDelete, "/secrets/db", nil); status != http.StatusNotFound {
		t.Fatalf("delete of a deleted secret: %d", status)
	}
	if status, _, _ := do(http.MethodDelete, "/secrets/tls", nil); status != http.StatusConflict {
		t.Fatalf("delete of a secret still mounted: %d", status)
	}

	// Another tenant: the namespace is not theirs, whatever the route.
	other := e.Tenant()
	other.Ensure()
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		raw, _ := json.Marshal(apiv1.SecretPut{Data: map[string]string{"url": "stolen"}})
		status, _, out := e.Raw(m, ns+"/secrets/tls", other.Token, "application/json", raw)
		bodies = append(bodies, string(out))
		if status != http.StatusNotFound {
			t.Errorf("%s of another tenant's secret: %d %s", m, status, out)
		}
	}
	if status, _, out := e.Raw(http.MethodGet, ns+"/secrets", other.Token, "", nil); status != http.StatusNotFound {
		t.Errorf("list of another tenant's secrets: %d %s", status, out)
	}
	if l, err := other.C.ListSecrets(context.Background()); err != nil || len(l) != 0 {
		t.Errorf("the other tenant's own list: %v %v", l, err)
	}
	if m, err := e.C.GetSecret(context.Background(), "tls"); err != nil || m.Version != 1 {
		t.Errorf("the other tenant changed the secret: %+v %v", m, err)
	}

	// At most MaxSecrets per namespace: one more is 403 quota_exceeded; a replace still works.
	q := e.Tenant()
	q.Ensure()
	for i := range apiv1.MaxSecrets {
		if _, err := q.C.PutSecret(context.Background(), fmt.Sprintf("s%d", i), map[string]string{"k": "v"}); err != nil {
			t.Fatalf("secret %d: %v", i, err)
		}
	}
	if _, err := q.C.PutSecret(context.Background(), "one-more", map[string]string{"k": "v"}); err == nil || !strings.Contains(err.Error(), apiv1.CodeQuotaExceeded) {
		t.Errorf("secret %d: %v (want quota_exceeded)", apiv1.MaxSecrets+1, err)
	}
	if _, err := q.C.PutSecret(context.Background(), "s0", map[string]string{"k": "v2"}); err != nil {
		t.Errorf("replacing a secret at the limit: %v", err)
	}

	for _, b := range bodies {
		if strings.Contains(b, canary) {
			t.Errorf("an answer carries a secret's value: %.300s", b)
		}
	}
}

func manyKeys(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("K%d", i)] = "v"
	}
	return m
}
