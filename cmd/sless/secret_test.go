package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// Mistakes in `secret set` and in fn deploy's secret flags are told before anything is sent: the
// commands run against a server that counts requests, and it must count none.
func TestSecretCLIRefusesBadInput(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no request was expected", http.StatusTeapot)
	}))
	defer srv.Close()
	c := newCLI(t, "SLESS_ENDPOINT="+srv.URL, "SLESS_API_TOKEN=x.y.z")
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("s", apiv1.MaxSecretValueBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	atLimit := filepath.Join(dir, "at-limit")
	if err := os.WriteFile(atLimit, []byte(strings.Repeat("s", apiv1.MaxSecretValueBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	code := writeDir(t, map[string]string{"handler.py": cliHandler})
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"secret", "set", "db", "s3cr3t-no-key"}, "", "must be KEY=VALUE"},
		{[]string{"secret", "set", "db", "=s3cr3t"}, "", "must be KEY=VALUE"},
		{[]string{"secret", "set", "db", "bad-key=s3cr3t"}, "", `secret key "bad-key" is invalid`},
		{[]string{"secret", "set", "db", "1KEY=s3cr3t"}, "", `secret key "1KEY" is invalid`},
		{[]string{"secret", "set", "db", "K=a", "K=b"}, "", "key K is given twice"},
		{[]string{"secret", "set", "db"}, "", "give at least one KEY=VALUE"},
		{[]string{"secret", "set", "Bad_Name", "K=s3cr3t"}, "", `secret name "Bad_Name" is invalid`},
		{[]string{"secret", "set", "db", "--from-file", "K=" + filepath.Join(dir, "missing")}, "", "--from-file K: stat " + filepath.Join(dir, "missing") + ": no such file"},
		{[]string{"secret", "set", "db", "--from-file", "K=" + dir}, "", "is a directory"},
		{[]string{"secret", "set", "db", "--from-file", "K=" + big}, "", "is 65537 bytes; a secret value is at most 65536 bytes (64.0 KiB)"},
		{[]string{"secret", "set", "db", "--from-file", "nopath"}, "", `--from-file "nopath" must be KEY=PATH`},
		{[]string{"secret", "set", "db", "K=-"}, strings.Repeat("s", apiv1.MaxSecretValueBytes+1), "standard input holds more than 65536 bytes"},
		{[]string{"secret", "set", "db", "A=-", "B=-"}, "x", "standard input is read for one key only"},
		// 17 values at the limit: each fits, the secret does not.
		{append([]string{"secret", "set", "db"}, fromFiles(atLimit, 17)...), "", "at most 1048576"},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-env", "DB_URL=db"}, "", `--secret-env DB_URL: secret reference "db" must be SECRET/KEY`},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-env", "SLESS_X=db/url"}, "", `"SLESS_X" is set by the platform`},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-env", "NOEQUALS"}, "", "must be NAME=SECRET/KEY"},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-file", "/etc/db=db"}, "", `secret_files path "/etc/db" must be a directory under /var/run/secrets/`},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-file", "/var/run/secrets/kubernetes.io=db"}, "", "Kubernetes' own"},
		{[]string{"fn", "deploy", code, "--name", "f", "--runtime", "python3.11", "--secret-file", "/var/run/secrets/db=Bad_Name"}, "", `--secret-file /var/run/secrets/db: secret name "Bad_Name" is invalid`},
	} {
		r := c.runIn(tc.stdin, tc.args...)
		if r.code != 2 && r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, r.code, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr+r.stdout, "s3cr3t") {
			t.Errorf("%v: the output shows the value: %s%s", tc.args, r.stdout, r.stderr)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("refused command lines sent %d requests", n)
	}
}

func fromFiles(path string, n int) []string {
	var args []string
	for i := range n {
		args = append(args, "--from-file", "K"+string(rune('A'+i))+"="+path)
	}
	return args
}

// secret set/ls/rm and fn deploy's secret flags against a real `sless up`: a function reads its
// secret from env and from a file, a new value reaches it without a deploy, no command prints a
// value, and rm of a secret in use says which function uses it.
func TestSecretCLI(t *testing.T) {
	u := testenv.StartSlessUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	c := newCLI(t, "SLESS_ENDPOINT="+u.URL, "SLESS_API_TOKEN="+u.Token)
	const url1, url2, password, cert = "postgres://v1-s3cr3t@db", "postgres://v2-s3cr3t@db", "pw-s3cr3t", "cert-s3cr3t\n"
	values := []string{url1, url2, password, strings.TrimSpace(cert), "s3cr3t"}
	noValues := func(what, out string) {
		t.Helper()
		for _, v := range values {
			if strings.Contains(out, v) {
				t.Errorf("%s shows a value (%q):\n%s", what, v, out)
			}
		}
	}
	certFile := filepath.Join(t.TempDir(), "tls.crt")
	if err := os.WriteFile(certFile, []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}

	r := c.runIn(password+"\n", "secret", "set", "db", "url="+url1, "password=-", "--from-file", "cert="+certFile)
	if r.code != 0 || !strings.Contains(r.stdout, "secret db written: version 1, keys cert, password, url") {
		t.Fatalf("secret set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noValues("secret set", r.stdout+r.stderr)
	if s, err := u.Client.GetSecret(ctx, "db"); err != nil || s.Version != 1 || !slices.Equal(s.Keys, []string{"cert", "password", "url"}) {
		t.Fatalf("the API has %+v %v", s, err)
	}

	ls := c.ok("secret", "ls")
	noValues("secret ls", ls.stdout)
	if lines := strings.Split(strings.TrimSpace(ls.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[0], "UPDATED") || !strings.Contains(lines[1], "db") || !strings.Contains(lines[1], "cert,password,url") ||
		!regexp.MustCompile(` 1 +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`).MatchString(lines[1]) {
		t.Errorf("secret ls:\n%s", ls.stdout)
	}
	var l apiv1.List[apiv1.Secret]
	js := c.ok("secret", "ls", "-o", "json").stdout
	noValues("secret ls -o json", js)
	if err := json.Unmarshal([]byte(js), &l); err != nil || len(l.Items) != 1 || l.Items[0].Version != 1 {
		t.Errorf("secret ls -o json: %s %v", js, err)
	}
	noValues("secret ls -o yaml", c.ok("secret", "ls", "-o", "yaml").stdout)

	// A function that shows what it got, so the test can see the values arrive.
	dir := writeDir(t, map[string]string{"handler.py": `import os
def handle(event):
    with open('/var/run/secrets/db/cert') as f:
        cert = f.read()
    return {'url': os.environ.get('DB_URL'), 'password': os.environ.get('DB_PASSWORD'), 'cert': cert}
`})
	r = c.ok("fn", "deploy", dir, "--name", "uses-db", "--runtime", "python3.11",
		"--secret-env", "DB_URL=db/url", "--secret-env", "DB_PASSWORD=db/password", "--secret-file", "/var/run/secrets/db=db")
	noValues("fn deploy", r.stdout+r.stderr)
	answers := func(want map[string]string) {
		t.Helper()
		waitUntil(t, 60*time.Second, "the function to answer "+want["url"], func() bool {
			r := c.run("invoke", "uses-db")
			var got map[string]string
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
				return false
			}
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		})
	}
	answers(map[string]string{"url": url1, "password": password, "cert": cert})
	get := c.ok("fn", "get", "uses-db").stdout
	for _, w := range []string{"Secret env:", "DB_PASSWORD=db/password, DB_URL=db/url", "Secret files:", "/var/run/secrets/db=db"} {
		if !strings.Contains(get, w) {
			t.Errorf("fn get lacks %q:\n%s", w, get)
		}
	}
	noValues("fn get", get)

	// A new value: version 2, and the function serves it without a deploy.
	img := func() string {
		f, err := u.Client.GetFunction(ctx, "uses-db")
		if err != nil {
			t.Fatal(err)
		}
		return f.Status.Image
	}
	before := img()
	r = c.runIn(password, "secret", "set", "db", "url="+url2, "password=-", "--from-file", "cert="+certFile)
	if r.code != 0 || !strings.Contains(r.stdout, "version 2") {
		t.Fatalf("secret set again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	answers(map[string]string{"url": url2, "password": password})
	if after := img(); after != before {
		t.Errorf("a new secret value rebuilt the function: %s → %s", before, after)
	}
	noValues("secret ls after the rotation", c.ok("secret", "ls").stdout)

	// Updating keeps the secret flags unless given; --secret-env replaces them.
	c.ok("fn", "deploy", dir, "--name", "uses-db", "--secret-env", "DB_URL=db/url")
	if f, err := u.Client.GetFunction(ctx, "uses-db"); err != nil || len(f.SecretEnv) != 1 || f.SecretFiles["/var/run/secrets/db"] != "db" {
		t.Errorf("after the update: %+v %v", f, err)
	}

	c.fails([]string{"secret", "rm", "db"}, "deleting secret db", "conflict", `is used by function(s) uses-db`)
	if _, err := u.Client.GetSecret(ctx, "db"); err != nil {
		t.Errorf("a secret in use was deleted: %v", err)
	}
	c.fails([]string{"secret", "rm", "nope"}, "not_found")
	c.ok("fn", "rm", "uses-db")
	if r := c.ok("secret", "rm", "db"); !strings.Contains(r.stdout, "secret db deleted") {
		t.Errorf("secret rm: %q", r.stdout)
	}
	if r := c.ok("secret", "ls"); strings.TrimSpace(r.stdout) != "NAME  KEYS  VERSION  UPDATED" {
		t.Errorf("secret ls after rm:\n%q", r.stdout)
	}
}
