package k8s_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// On the real cluster a function reads its secrets from env (a key reference) and from files (a
// Secret volume); the API's answers, the Function and its Deployment hold no value; a new value
// rolls the function without a build; a missing key fails the start naming it; another tenant
// cannot read, list or use the secret; a secret in use cannot be deleted.
func TestSecretsOnKubernetes(t *testing.T) {
	c := tenant(t, subject("secrets"))
	ctx := context.Background()
	ns := c.Namespace()
	const v1, v2, cert = "CANARY-k8s-url-one-7a3", "CANARY-k8s-url-two-7a3", "CANARY-k8s-cert-7a3"
	canaries := []string{v1, v2, cert}
	if _, err := c.PutSecret(ctx, "db", map[string]string{"url": v1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutSecret(ctx, "tls", map[string]string{"cert": cert, "key": "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "sec", Runtime: "python3.11",
		SecretEnv: map[string]string{"DB_URL": "db/url"}, SecretFiles: map[string]string{"/var/run/secrets/tls": "tls"}}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "sec", "python3.11", map[string]string{"handler.py": testenv.SecretsHandler})
	var got testenv.SecretsRead
	call := func() int {
		code, body := get(c.FunctionURL("sec"))
		got.DB, got.Cert = "", ""
		json.Unmarshal([]byte(body), &got)
		return code
	}
	waitFor(t, "the function to answer", time.Minute, func() bool { return call() == 200 })
	if got.DB != v1 || got.Cert != cert || strings.Join(got.Files, ",") != "cert,key" || got.Writable {
		t.Fatalf("the handler read %+v", got)
	}

	if _, err := c.PutSecret(ctx, "db", map[string]string{"url": v2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new value", 2*time.Minute, func() bool { return call() == 200 && got.DB == v2 })
	if f2, err := c.GetFunction(ctx, "sec"); err != nil || f2.Status.Image != f.Status.Image {
		t.Errorf("rotation rebuilt the function: %v %v", f2, err)
	}

	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "miss", Runtime: "python3.11", SecretEnv: map[string]string{"X": "db/nokey"}}); err != nil {
		t.Fatal(err)
	}
	m := deployUntil(t, c, "miss", "python3.11", map[string]string{"handler.py": testenv.SecretsHandler}, apiv1.PhaseFailed)
	if !strings.Contains(m.Status.Message, `has no key "nokey"`) {
		t.Errorf("a missing key: %+v", m.Status)
	}

	if err := c.DeleteSecret(ctx, "db"); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("delete of a secret in use: %v", err)
	}

	other := tenant(t, subject("secrets-other"))
	for _, path := range []string{"/secrets", "/secrets/db"} {
		req, _ := http.NewRequest(http.MethodGet, cluster.Endpoint+"/v1/namespaces/"+ns+path, nil)
		req.Header.Set("Authorization", "Bearer "+token(t, subject("secrets-other")))
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
	s := deployUntil(t, other, "steal", "python3.11", map[string]string{"handler.py": testenv.SecretsHandler}, apiv1.PhaseFailed)
	if !strings.Contains(s.Status.Message, `secret "db" does not exist`) {
		t.Errorf("another tenant's reference: %+v", s.Status)
	}

	var answers []string
	for _, path := range []string{"/functions/sec", "/functions", "/secrets", "/secrets/db", "/functions/sec/events", "/functions/sec/logs",
		"/functions/sec/invocations", "/functions/miss", "/functions/miss/events"} {
		req, _ := http.NewRequest(http.MethodGet, cluster.Endpoint+"/v1/namespaces/"+ns+path, nil)
		req.Header.Set("Authorization", "Bearer "+token(t, subject("secrets")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers = append(answers, path+": "+string(b))
	}
	answers = append(answers, kubectl(t, "-n", ns, "get", "functions.sless.dev,deployments,replicasets,events", "-o", "yaml"),
		kubectl(t, "get", "namespace", ns, "-o", "yaml"))
	for _, a := range answers {
		for _, v := range canaries {
			if strings.Contains(a, v) {
				t.Errorf("%q found in %.300s", v, a)
			}
		}
	}
}
