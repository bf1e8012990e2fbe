package main_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// A real `sless up` with a scrape token: its public listener answers 404 for /metrics with no
// token, the dev tenant's JWT, an "admin" JWT and the scrape token itself; its metrics listener
// answers 401 without the scrape token, with a wrong one and with either JWT, and serves every
// series (the API's, the builds', the process's) with it.
func TestUpMetricsListener(t *testing.T) {
	const scrapeToken = "scrape-0123456789abcdef-up"
	tokenFile := filepath.Join(t.TempDir(), "scrape-token")
	if err := os.WriteFile(tokenFile, []byte(scrapeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	u := testenv.StartSlessUp(t, t.TempDir(), "", "", "--metrics-token-file", tokenFile)
	secret, err := os.ReadFile(filepath.Join(u.DataDir, "dev-secret"))
	if err != nil {
		t.Fatal(err)
	}
	admin := apitest.AdminToken(t, []byte(strings.TrimSpace(string(secret))))
	// The admin JWT is valid: the API takes it (so the 404s below are not a refused token's).
	if c, _ := client.New(u.URL, admin); c.EnsureNamespace(context.Background()) != nil {
		t.Fatal("sless up refuses the admin JWT")
	}
	for who, tok := range map[string]string{"no token": "", "the tenant's JWT": u.Token, "an admin JWT": admin, "the scrape token": scrapeToken} {
		req, _ := http.NewRequest(http.MethodGet, u.URL+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("the public /metrics with %s: %d, want 404", who, resp.StatusCode)
		}
	}
	for who, tok := range map[string]string{"no token": "", "a wrong token": scrapeToken + "x", "the tenant's JWT": u.Token, "an admin JWT": admin} {
		if code, body := u.Metrics(tok); code != http.StatusUnauthorized || strings.Contains(body, "sless_") {
			t.Errorf("the metrics listener with %s: %d %.200s, want 401", who, code, body)
		}
	}
	code, body := u.Metrics(scrapeToken)
	for _, want := range []string{`sless_http_requests_total{code="200",method="POST",route="/v1/namespaces/{ns}/ensure"}`,
		`sless_builds_total{result="succeeded"} 0`, "process_resident_memory_bytes"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the metrics listener with the scrape token: %d, no %s", code, want)
		}
	}
}

// Bad metrics flags stop sless up before it writes anything: a token file that is missing, empty
// or not one token, and a metrics address that is busy or the public one. The error names the
// flag.
func TestUpMetricsFlagsBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	public := testenv.FreeAddr(t)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"missing token file": {[]string{"--metrics-token-file", filepath.Join(dir, "nope")}, "--metrics-token-file"},
		"empty token file":   {[]string{"--metrics-token-file", write("empty", "\n")}, "is empty"},
		"two tokens":         {[]string{"--metrics-token-file", write("two", "a b\n")}, "one line of visible ASCII"},
		"busy address":       {[]string{"--metrics-listen", busy.Addr().String()}, "--metrics-listen " + busy.Addr().String()},
		"the public address": {[]string{"--listen", public, "--metrics-listen", public}, "--metrics-listen " + public},
	} {
		data := filepath.Join(dir, "data-"+strings.ReplaceAll(name, " ", "-"))
		args := append([]string{"up", "--data-dir", data, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, tc.args...)
		res := sless(t, nil, args...)
		if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want it to say %q", name, res.code, res.stderr, tc.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("%s: the data dir was made: %v", name, err)
		}
	}
}
