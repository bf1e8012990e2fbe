package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/internal/testenv"
)

// A function reads its secrets from its environment and from files on a real sless up: no answer
// of the API (the function, the secret, events, logs, invocations) carries a value, nor does any
// file under the data dir; a new value restarts the function without a build; a reference to a
// missing key fails the start naming the key; another tenant cannot read, list or use the secret;
// a secret in use cannot be deleted.
func TestSecretsUp(t *testing.T) {
	testenv.NewPodman(t)
	dataDir := t.TempDir()
	u := startUp(t, dataDir, "", "")
	ctx := context.Background()
	ns := u.c.Namespace()
	const v1, v2, cert = "CANARY-db-url-one-51d7", "CANARY-db-url-two-51d7", "CANARY-cert-51d7"
	canaries := []string{v1, v2, cert}
	if _, err := u.c.PutSecret(ctx, "db", map[string]string{"url": v1, "user": "app"}); err != nil {
		t.Fatal(err)
	}
	if _, err := u.c.PutSecret(ctx, "tls", map[string]string{"cert": cert, "key": "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "sec", Runtime: "python3.11",
		SecretEnv: map[string]string{"DB_URL": "db/url"}, SecretFiles: map[string]string{"/var/run/secrets/tls": "tls"}}); err != nil {
		t.Fatal(err)
	}
	f := u.deploy(t, "sec", "python3.11", map[string]string{"handler.py": testenv.SecretsHandler})
	if f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("status %+v\n%s", f.Status, u.logTail())
	}
	built := f.Status.LastBuiltAt
	var got testenv.SecretsRead
	call := func() int {
		t.Helper()
		code, body := u.get("/fn/" + ns + "/sec")
		got.DB, got.Cert = "", ""
		json.Unmarshal([]byte(body), &got)
		return code
	}
	if code := call(); code != 200 || got.DB != v1 || got.Cert != cert || strings.Join(got.Files, ",") != "cert,key" || got.Writable {
		t.Fatalf("the handler read %d %+v", code, got)
	}

	// Rotation: the function restarts with the new value; the image is the same (no build).
	if _, err := u.c.PutSecret(ctx, "db", map[string]string{"url": v2, "user": "app"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { return call() == 200 && got.DB == v2 }, "the new value")
	if f2, err := u.c.GetFunction(ctx, "sec"); err != nil || f2.Status.Image != f.Status.Image || !f2.Status.LastBuiltAt.Equal(*built) {
		t.Errorf("rotation rebuilt the function: %+v %v", f2, err)
	}

	// A missing key: the start fails naming it (and no value).
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "miss", Runtime: "python3.11",
		SecretEnv: map[string]string{"X": "db/nokey"}}); err != nil {
		t.Fatal(err)
	}
	m := u.deploy(t, "miss", "python3.11", map[string]string{"handler.py": testenv.SecretsHandler})
	if m.Status.Phase != apiv1.PhaseFailed || !strings.Contains(m.Status.Message, `"nokey"`) || !strings.Contains(m.Status.Message, `"db"`) {
		t.Errorf("a missing key: %+v", m.Status)
	}
	// Adding the key starts it.
	if _, err := u.c.PutSecret(ctx, "db", map[string]string{"url": v2, "user": "app", "nokey": "now"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool {
		m, _ = u.c.GetFunction(ctx, "miss")
		return m.Status.Phase == apiv1.PhaseReady
	}, "the function whose key appeared")

	// In use: 409.
	if err := u.c.DeleteSecret(ctx, "db"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("delete of a secret in use: %v", err)
	}

	// Another tenant: cannot read or list it, and its own reference finds nothing.
	other := otherTenant(t, u, "eve@example.com")
	eveToken, _ := auth.IssueHS256(devSecret(t, u), "eve@example.com", time.Hour)
	for _, path := range []string{"/secrets", "/secrets/db"} {
		req, _ := http.NewRequest(http.MethodGet, u.url+"/v1/namespaces/"+ns+path, nil)
		req.Header.Set("Authorization", "Bearer "+eveToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("another tenant's GET %s: %d", path, resp.StatusCode)
		}
	}
	if _, err := other.CreateFunction(ctx, apiv1.Function{Name: "steal", Runtime: "python3.11", SecretEnv: map[string]string{"DB_URL": "db/url"}}); err != nil {
		t.Fatal(err)
	}
	z := testenv.Zip(map[string]string{"handler.py": testenv.SecretsHandler})
	if _, err := other.Upload(ctx, "steal", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool {
		s, _ := other.GetFunction(ctx, "steal")
		return s != nil && s.Status.Phase == apiv1.PhaseFailed && strings.Contains(s.Status.Message, "does not exist")
	}, "another tenant's reference to fail")

	// Nothing the API answers carries a value.
	var answers []string
	for _, path := range []string{"/functions/sec", "/functions", "/secrets", "/secrets/db", "/functions/sec/events", "/functions/sec/logs",
		"/functions/sec/invocations", "/functions/miss/events", "/functions/miss"} {
		answers = append(answers, path+": "+authGet(t, u, path))
	}
	for _, a := range answers {
		for _, c := range canaries {
			if strings.Contains(a, c) {
				t.Errorf("an answer carries a secret's value: %.400s", a)
			}
		}
	}
	if _, m := u.Metrics(""); containsAny(m, canaries) {
		t.Error("/metrics carries a secret's value")
	}
	if containsAny(u.logTail(), canaries) {
		t.Error("sless up's log carries a secret's value")
	}
	// Nor does any file under the data dir (the state, the registry, podman's storage, logs).
	filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fh, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer fh.Close()
		b, _ := io.ReadAll(io.LimitReader(fh, 64<<20))
		for _, c := range canaries {
			if bytes.Contains(b, []byte(c)) {
				t.Errorf("%s holds a secret's value in clear", p)
			}
		}
		return nil
	})
}

func containsAny(s string, subs []string) bool {
	for _, c := range subs {
		if strings.Contains(s, c) {
			return true
		}
	}
	return false
}

// authGet is GET /v1/namespaces/<own>/<path> with the tenant's token: the body, whatever the status.
func authGet(t *testing.T, u *up, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u.url+"/v1/namespaces/"+u.c.Namespace()+path, nil)
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
