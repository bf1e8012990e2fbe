package apitest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/codestore"
)

// Sign signs claims with key by m, with a kid header when given.
func Sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Claims are a subject's claims valid for an hour, with extra set (nil removes a claim).
func Claims(sub string, extra map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// assertNothingWritten: no function or stored code appeared.
func (e *Env) assertNothingWritten(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{e.NS, apiv1.NamespaceFor("mallory")} {
		if fs, _ := e.Be.Functions.List(ctx, ns); len(fs) > 0 {
			t.Errorf("functions were written in %s: %v", ns, fs)
		}
	}
	e.assertNoCode(t)
}

func (e *Env) assertNoCode(t *testing.T) {
	t.Helper()
	if files := e.StoredFiles(); len(files) > 0 {
		t.Errorf("code was stored: %v", files)
	}
}

func testTokensRefused(t *testing.T, bk Backend) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	pubDER, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	v, err := auth.New(auth.WithPublicKeyPEM(pubPEM), auth.WithIssuer("https://issuer.test"), auth.WithAudience("sless"))
	if err != nil {
		t.Fatal(err)
	}
	codeDir := t.TempDir()
	code, _ := codestore.NewDir(codeDir)
	e := NewEnvWith(t, bk, code, codeDir, v)
	std := map[string]any{"iss": "https://issuer.test", "aud": "sless"}
	good := Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, std), "")
	body, _ := json.Marshal(apiv1.Function{Name: "f", Runtime: "python3.11"})

	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range std {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, Claims(e.Subject, std)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	// Edited payload: a valid token whose payload now names someone else, old signature kept.
	parts := strings.Split(good, ".")
	forged, _ := json.Marshal(Claims("mallory", std))
	edited := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forged) + "." + parts[2]

	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"alg none", none},
		{"HS256 with the RSA public key as secret", Sign(t, jwt.SigningMethodHS256, pubPEM, Claims(e.Subject, std), "")},
		{"wrong key", Sign(t, jwt.SigningMethodRS256, otherKey, Claims(e.Subject, std), "")},
		{"edited payload", edited},
		{"expired", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, with(map[string]any{"exp": time.Now().Add(-2 * time.Minute).Unix()})), "")},
		{"nbf in the future", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, with(map[string]any{"nbf": time.Now().Add(10 * time.Minute).Unix()})), "")},
		{"no exp", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, with(map[string]any{"exp": nil})), "")},
		{"wrong iss", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, with(map[string]any{"iss": "https://evil.test"})), "")},
		{"wrong aud", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims(e.Subject, with(map[string]any{"aud": "other"})), "")},
		{"no sub", Sign(t, jwt.SigningMethodRS256, rsaKey, Claims("", std), "")},
		{"60 KB bogus token", strings.Repeat("A", 60_000)},
		{"1 MB bogus token", strings.Repeat("A", 1_000_000)},
		{"not a JWT", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/namespaces/" + e.NS + "/ensure", "/v1/namespaces/" + e.NS + "/functions"} {
				code, ecode, b := e.Raw("POST", path, tc.token, "application/json", body)
				if len(tc.token) > api.MaxHeaderBytes {
					// Refused by the server before any handler reads it.
					if code != http.StatusRequestHeaderFieldsTooLarge {
						t.Errorf("POST %s: %d %s, want 431", path, code, b)
					}
					continue
				}
				if code != 401 || ecode != apiv1.CodeUnauthenticated {
					t.Errorf("POST %s: %d %s %s", path, code, ecode, b)
				}
			}
			e.assertNothingWritten(t)
		})
	}
	// The good token works, so the refusals above are about the tokens.
	if code, _, b := e.Raw("POST", "/v1/namespaces/"+e.NS+"/ensure", good, "", nil); code != 200 {
		t.Fatalf("good token: %d %s", code, b)
	}

	t.Run("another tenant's namespace", func(t *testing.T) {
		other := apiv1.NamespaceFor("bob@example.com")
		for _, p := range []struct{ method, path string }{
			{"POST", "/v1/namespaces/" + other + "/ensure"},
			{"GET", "/v1/namespaces/" + other + "/functions"},
			{"POST", "/v1/namespaces/" + other + "/functions"},
			{"DELETE", "/v1/namespaces/" + other},
		} {
			code, ecode, _ := e.Raw(p.method, p.path, good, "application/json", body)
			if code != 404 || ecode != apiv1.CodeNotFound {
				t.Errorf("%s %s: %d %s, want 404 not_found", p.method, p.path, code, ecode)
			}
		}
		if ok, _ := e.Be.Namespaces.Exists(context.Background(), other); ok {
			t.Error("the other tenant's namespace was created")
		}
		e.assertNothingWritten(t)
	})
}

func testInvalidSpecs(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("target")
	base := "/v1/namespaces/" + e.NS
	for _, tc := range []struct {
		name, method, path, body string
	}{
		{"uppercase name", "POST", "/functions", `{"name":"Hello","runtime":"python3.11"}`},
		{"dots in name", "POST", "/functions", `{"name":"a..b","runtime":"python3.11"}`},
		{"64 characters", "POST", "/functions", `{"name":"` + strings.Repeat("a", 64) + `","runtime":"python3.11"}`},
		{"empty name", "POST", "/functions", `{"runtime":"python3.11"}`},
		{"unknown runtime", "POST", "/functions", `{"name":"f","runtime":"ruby3"}`},
		{"memory too small", "POST", "/functions", `{"name":"f","runtime":"python3.11","memory_mb":16}`},
		{"timeout too long", "POST", "/functions", `{"name":"f","runtime":"python3.11","timeout_sec":100000}`},
		{"bad env name", "POST", "/functions", `{"name":"f","runtime":"python3.11","env_vars":{"1BAD":"x"}}`},
		{"negative min_replicas", "POST", "/functions", `{"name":"f","runtime":"python3.11","min_replicas":-1}`},
		{"min_replicas 101", "POST", "/functions", `{"name":"f","runtime":"python3.11","min_replicas":101}`},
		{"max_replicas 101", "POST", "/functions", `{"name":"f","runtime":"python3.11","max_replicas":101}`},
		{"max below min", "POST", "/functions", `{"name":"f","runtime":"python3.11","min_replicas":5,"max_replicas":3}`},
		{"concurrency 1001", "POST", "/functions", `{"name":"f","runtime":"python3.11","concurrency":1001}`},
		{"negative concurrency", "POST", "/functions", `{"name":"f","runtime":"python3.11","concurrency":-1}`},
		{"idle_timeout_sec 4", "POST", "/functions", `{"name":"f","runtime":"python3.11","idle_timeout_sec":4}`},
		{"idle_timeout_sec beyond a day", "POST", "/functions", `{"name":"f","runtime":"python3.11","idle_timeout_sec":86401}`},
		{"max below min on update", "PUT", "/functions/target", `{"name":"target","runtime":"python3.11","min_replicas":5,"max_replicas":3}`},
		{"reserved env", "POST", "/functions", `{"name":"f","runtime":"python3.11","env_vars":{"HANDLER":"x.y"}}`},
		{"bad entrypoint", "POST", "/functions", `{"name":"f","runtime":"python3.11","entrypoint":"nodot"}`},
		{"not JSON", "POST", "/functions", `{"name":`},
		{"bad cron", "POST", "/triggers", `{"name":"t","type":"cron","function_ref":"target","schedule":"every day at 9"}`},
		{"six-field cron", "POST", "/triggers", `{"name":"t","type":"cron","function_ref":"target","schedule":"0 0 9 * * *"}`},
		{"schedule on http", "POST", "/triggers", `{"name":"t","type":"http","function_ref":"target","schedule":"* * * * *"}`},
		{"unknown trigger type", "POST", "/triggers", `{"name":"t","type":"kafka","function_ref":"target"}`},
		{"rabbitmq without its block", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target"}`},
		{"rabbitmq block on http", "POST", "/triggers", `{"name":"t","type":"http","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q"}}`},
		{"rabbitmq with a schedule", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","schedule":"* * * * *","rabbitmq":{"url_secret":"mq/url","queue":"q"}}`},
		{"rabbitmq URL inline", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"amqp://u:hunter2@broker/","queue":"q"}}`},
		{"rabbitmq url_secret without key", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq","queue":"q"}}`},
		{"rabbitmq url_secret bad name", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"MQ/url","queue":"q"}}`},
		{"rabbitmq no queue", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url"}}`},
		{"rabbitmq reserved queue", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"amq.gen-x"}}`},
		{"rabbitmq queue 256 bytes", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"` + strings.Repeat("q", 256) + `"}}`},
		{"rabbitmq queue with a newline", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"a\nb"}}`},
		{"rabbitmq dead letter is the queue", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","dead_letter":"q"}}`},
		{"rabbitmq prefetch 1001", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","prefetch":1001}}`},
		{"rabbitmq negative prefetch", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","prefetch":-1}}`},
		{"rabbitmq negative max_retries", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","max_retries":-1}}`},
		{"rabbitmq max_retries 101", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","max_retries":101}}`},
		{"rabbitmq backoff beyond an hour", "POST", "/triggers", `{"name":"t","type":"rabbitmq","function_ref":"target","rabbitmq":{"url_secret":"mq/url","queue":"q","retry_backoff_ms":3600001}}`},
		{"job event not JSON", "POST", "/jobs", `{"name":"j","function_ref":"target","event_json":"{oops","run_id":1}`},
		{"negative run_id", "POST", "/jobs", `{"name":"j","function_ref":"target","run_id":-1}`},
		{"%2F in a name", "GET", "/functions/a%2Fb", ``},
		{"dot-dot as a name", "DELETE", "/functions/..", ``},
		{"uppercase in the path", "DELETE", "/functions/Target", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ecode, b := e.Raw(tc.method, base+tc.path, e.Token, "application/json", []byte(tc.body))
			if code != 400 || ecode != apiv1.CodeInvalidArgument {
				t.Errorf("%d %s %s", code, ecode, b)
			}
			var m apiv1.ErrorBody
			if json.Unmarshal(b, &m); m.Error.Message == "" {
				t.Error("no message")
			}
			if strings.Contains(string(b), "hunter2") {
				t.Errorf("the answer repeats the inline URL's password: %s", b)
			}
		})
	}
	ctx := context.Background()
	if fs, _ := e.Be.Functions.List(ctx, e.NS); len(fs) != 1 {
		t.Errorf("functions: %v", fs)
	}
	if ts, _ := e.Be.Triggers.List(ctx, e.NS); len(ts) != 0 {
		t.Errorf("triggers: %v", ts)
	}
	if js, _ := e.Be.Jobs.List(ctx, e.NS); len(js) != 0 {
		t.Errorf("jobs: %v", js)
	}
	// Fixed trigger fields cannot change through PATCH.
	e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: "http", FunctionRef: "target"})
	for _, body := range []string{`{"enabled":false,"type":"cron"}`, `{"enabled":false,"function_ref":"other"}`, `{}`, `{"enabled":"no"}`} {
		if code, ecode, b := e.Raw("PATCH", base+"/triggers/web", e.Token, "application/json", []byte(body)); code != 400 || ecode != apiv1.CodeInvalidArgument {
			t.Errorf("PATCH %s: %d %s %s", body, code, ecode, b)
		}
	}
	if tr, _ := e.C.GetTrigger(ctx, "web"); !tr.IsEnabled() || tr.Type != "http" {
		t.Errorf("trigger changed: %+v", tr)
	}
}

func testBadUploads(t *testing.T, bk Backend) {
	e := NewEnv(t, bk, api.WithUploadLimit(64<<10))
	e.Ensure()
	e.Function("f")
	zeros := strings.Repeat("0", 8<<20)
	valid := ZipOf(t, map[string]string{"handler.py": "x"})
	for _, tc := range []struct {
		name  string
		ctype string
		body  []byte
		code  int
		ecode string
	}{
		{"zip slip", "application/zip", ZipOf(t, map[string]string{"../../etc/cron.d/evil": "x"}), 400, apiv1.CodeInvalidArchive},
		{"absolute path", "application/zip", ZipOf(t, map[string]string{"/etc/passwd": "x"}), 400, apiv1.CodeInvalidArchive},
		{"symlink", "application/zip", ZipOf(t, map[string]string{"passwd@link": "/etc/passwd"}), 400, apiv1.CodeInvalidArchive},
		{"zip bomb", "application/zip", ZipOf(t, map[string]string{"zeros": zeros}), 400, apiv1.CodeInvalidArchive},
		{"not a zip", "application/zip", []byte("this is plain text"), 400, apiv1.CodeInvalidArchive},
		{"empty body", "application/zip", nil, 400, apiv1.CodeInvalidArchive},
		{"empty zip", "application/zip", ZipOf(t, nil), 400, apiv1.CodeInvalidArchive},
		{"truncated zip", "application/zip", valid[:len(valid)/2], 400, apiv1.CodeInvalidArchive},
		{"oversize upload", "application/zip", bytes.Repeat([]byte("x"), 65<<10), 413, apiv1.CodePayloadTooLarge},
		{"wrong content type", "text/plain", valid, 400, apiv1.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ecode, b := e.Raw("POST", "/v1/namespaces/"+e.NS+"/functions/f/upload", e.Token, tc.ctype, tc.body)
			if code != tc.code || ecode != tc.ecode {
				t.Errorf("%d %s %s; want %d %s", code, ecode, b, tc.code, tc.ecode)
			}
			e.assertNoCode(t)
			if f, _ := e.C.GetFunction(context.Background(), "f"); f.Status.CodeSHA256 != "" {
				t.Errorf("the function recorded code %s", f.Status.CodeSHA256)
			}
		})
	}
	t.Run("oversize without Content-Length", func(t *testing.T) {
		req, _ := http.NewRequest("POST", e.URL+"/v1/namespaces/"+e.NS+"/functions/f/upload", &chunked{n: 100 << 10})
		req.Header.Set("Authorization", "Bearer "+e.Token)
		req.Header.Set("Content-Type", "application/zip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("%d", resp.StatusCode)
		}
		e.assertNoCode(t)
	})
}

// testProvidedUploads: a provided function's upload must hold an executable regular file
// `bootstrap` at its root. Each bad case is 400 invalid_archive naming bootstrap, with nothing
// stored and nothing recorded; a good one is taken, and the same archive on a python function is
// fine (the rule is the runtime's).
func testProvidedUploads(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	ctx := context.Background()
	if _, err := e.C.CreateFunction(ctx, apiv1.Function{Name: "own", Runtime: apiv1.RuntimeProvided}); err != nil {
		t.Fatal(err)
	}
	upload := func(fn string, body []byte) (int, string, []byte) {
		return e.Raw("POST", "/v1/namespaces/"+e.NS+"/functions/"+fn+"/upload", e.Token, "application/zip", body)
	}
	for _, tc := range []struct {
		name  string
		files []ModeFile
	}{
		{"no bootstrap", []ModeFile{{Name: "main", Body: "\x7fELF", Mode: 0o755}}},
		{"bootstrap in a subdirectory", []ModeFile{{Name: "bin/bootstrap", Body: "#!/bin/sh\n", Mode: 0o755}}},
		{"bootstrap not executable", []ModeFile{{Name: "bootstrap", Body: "#!/bin/sh\n", Mode: 0o644}}},
		{"bootstrap a directory", []ModeFile{{Name: "bootstrap/", Mode: os.ModeDir | 0o755}, {Name: "bootstrap/run", Body: "x", Mode: 0o755}}},
		{"bootstrap a symlink", []ModeFile{{Name: "bootstrap", Body: "/bin/sh", Mode: os.ModeSymlink | 0o777}}},
		{"only a package.json", []ModeFile{{Name: "package.json", Body: `{"dependencies":{"left-pad":"1.3.0"}}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ecode, b := upload("own", ZipModes(t, tc.files...))
			if code != 400 || ecode != apiv1.CodeInvalidArchive || !strings.Contains(string(b), "bootstrap") {
				t.Errorf("%d %s %s; want 400 %s naming bootstrap", code, ecode, b, apiv1.CodeInvalidArchive)
			}
			e.assertNoCode(t)
			if f, _ := e.C.GetFunction(ctx, "own"); f.Status.CodeSHA256 != "" {
				t.Errorf("the function recorded code %s", f.Status.CodeSHA256)
			}
		})
	}
	// The same bootstrap-less archive is a python function's business, not refused.
	e.Function("py")
	if code, ecode, b := upload("py", ZipModes(t, ModeFile{Name: "handler.py", Body: "def handle(e): return e\n"})); code != 202 {
		t.Errorf("python upload: %d %s %s", code, ecode, b)
	}
	// A good one: an executable bootstrap (setuid in the zip: taken, and dropped by the layer).
	good := ZipModes(t, ModeFile{Name: "bootstrap", Body: "#!/bin/sh\nexec /app/function/server\n", Mode: os.ModeSetuid | 0o755},
		ModeFile{Name: "server", Body: "\x7fELF", Mode: 0o755}, ModeFile{Name: "package.json", Body: "{}"})
	code, ecode, b := upload("own", good)
	if code != 202 {
		t.Fatalf("good provided upload: %d %s %s", code, ecode, b)
	}
	if f, _ := e.C.GetFunction(ctx, "own"); f.Status.CodeSHA256 == "" {
		t.Error("the good upload was not recorded")
	}
}

// ModeFile is one entry of ZipModes: a name ending in "/" is a directory; Mode carries the Unix
// mode (and type bits: os.ModeSymlink makes Body the link's target).
type ModeFile struct {
	Name, Body string
	Mode       os.FileMode
}

// ZipModes makes a zip whose entries carry Unix modes, in the order given.
func ZipModes(t testing.TB, files ...ModeFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.Name, Method: zip.Deflate}
		if f.Mode == 0 {
			f.Mode = 0o644
		}
		h.SetMode(f.Mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.Body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chunked is a body of unknown length (sent chunked).
type chunked struct{ n int }

func (c *chunked) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	c.n -= k
	return k, nil
}
