package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/codestore"
)

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
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

func claims(sub string, extra map[string]any) jwt.MapClaims {
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
func (e *env) assertNothingWritten(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{e.ns, apiv1.NamespaceFor("mallory")} {
		if fs, _ := e.be.Functions.List(ctx, ns); len(fs) > 0 {
			t.Errorf("functions were written in %s: %v", ns, fs)
		}
	}
	e.assertNoCode(t)
}

func (e *env) assertNoCode(t *testing.T) {
	t.Helper()
	if files := e.storedFiles(); len(files) > 0 {
		t.Errorf("code was stored: %v", files)
	}
}

func TestTokensRefused(t *testing.T) { eachBackend(t, testTokensRefused) }

func testTokensRefused(t *testing.T, backend string) {
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
	e := newEnvWith(t, backend, code, codeDir, v)
	std := map[string]any{"iss": "https://issuer.test", "aud": "sless"}
	good := sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, std), "")
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
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(e.subject, std)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	// Edited payload: a valid token whose payload now names someone else, old signature kept.
	parts := strings.Split(good, ".")
	forged, _ := json.Marshal(claims("mallory", std))
	edited := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forged) + "." + parts[2]

	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"alg none", none},
		{"HS256 with the RSA public key as secret", sign(t, jwt.SigningMethodHS256, pubPEM, claims(e.subject, std), "")},
		{"wrong key", sign(t, jwt.SigningMethodRS256, otherKey, claims(e.subject, std), "")},
		{"edited payload", edited},
		{"expired", sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, with(map[string]any{"exp": time.Now().Add(-2 * time.Minute).Unix()})), "")},
		{"nbf in the future", sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, with(map[string]any{"nbf": time.Now().Add(10 * time.Minute).Unix()})), "")},
		{"no exp", sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, with(map[string]any{"exp": nil})), "")},
		{"wrong iss", sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, with(map[string]any{"iss": "https://evil.test"})), "")},
		{"wrong aud", sign(t, jwt.SigningMethodRS256, rsaKey, claims(e.subject, with(map[string]any{"aud": "other"})), "")},
		{"no sub", sign(t, jwt.SigningMethodRS256, rsaKey, claims("", std), "")},
		{"1 MB bogus token", strings.Repeat("A", 1_000_000)},
		{"not a JWT", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/namespaces/" + e.ns + "/ensure", "/v1/namespaces/" + e.ns + "/functions"} {
				code, ecode, b := e.raw("POST", path, tc.token, "application/json", body)
				if code != 401 || ecode != apiv1.CodeUnauthenticated {
					t.Errorf("POST %s: %d %s %s", path, code, ecode, b)
				}
			}
			e.assertNothingWritten(t)
		})
	}
	// The good token works, so the refusals above are about the tokens.
	if code, _, b := e.raw("POST", "/v1/namespaces/"+e.ns+"/ensure", good, "", nil); code != 200 {
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
			code, ecode, _ := e.raw(p.method, p.path, good, "application/json", body)
			if code != 404 || ecode != apiv1.CodeNotFound {
				t.Errorf("%s %s: %d %s, want 404 not_found", p.method, p.path, code, ecode)
			}
		}
		if ok, _ := e.be.Namespaces.Exists(context.Background(), other); ok {
			t.Error("the other tenant's namespace was created")
		}
		e.assertNothingWritten(t)
	})
}

// JWKS: keys from a URL; an unknown kid fails fast instead of hanging.
func TestJWKS(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	jwks := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"k1","alg":"RS256","use":"sig","n":%q,"e":%q}]}`,
		base64.RawURLEncoding.EncodeToString(key.N.Bytes()), base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes()))
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(jwks))
	}))
	defer keys.Close()
	v, err := auth.New(auth.WithJWKS(keys.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, key, claims("alice", nil), "k1")); err != nil {
		t.Errorf("valid JWKS token: %v", err)
	}
	start := time.Now()
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, key, claims("alice", nil), "unknown")); err == nil {
		t.Error("unknown kid accepted")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("unknown kid took %v", d)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, other, claims("alice", nil), "k1")); err == nil {
		t.Error("token signed by another key with a known kid accepted")
	}
}

func TestInvalidSpecs(t *testing.T) { eachBackend(t, testInvalidSpecs) }

func testInvalidSpecs(t *testing.T, backend string) {
	e := newEnvOn(t, backend)
	e.ensure()
	e.function("target")
	base := "/v1/namespaces/" + e.ns
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
		{"reserved env", "POST", "/functions", `{"name":"f","runtime":"python3.11","env_vars":{"HANDLER":"x.y"}}`},
		{"bad entrypoint", "POST", "/functions", `{"name":"f","runtime":"python3.11","entrypoint":"nodot"}`},
		{"not JSON", "POST", "/functions", `{"name":`},
		{"bad cron", "POST", "/triggers", `{"name":"t","type":"cron","function_ref":"target","schedule":"every day at 9"}`},
		{"six-field cron", "POST", "/triggers", `{"name":"t","type":"cron","function_ref":"target","schedule":"0 0 9 * * *"}`},
		{"schedule on http", "POST", "/triggers", `{"name":"t","type":"http","function_ref":"target","schedule":"* * * * *"}`},
		{"unknown trigger type", "POST", "/triggers", `{"name":"t","type":"kafka","function_ref":"target"}`},
		{"job event not JSON", "POST", "/jobs", `{"name":"j","function_ref":"target","event_json":"{oops","run_id":1}`},
		{"negative run_id", "POST", "/jobs", `{"name":"j","function_ref":"target","run_id":-1}`},
		{"%2F in a name", "GET", "/functions/a%2Fb", ``},
		{"dot-dot as a name", "DELETE", "/functions/..", ``},
		{"uppercase in the path", "DELETE", "/functions/Target", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ecode, b := e.raw(tc.method, base+tc.path, e.token, "application/json", []byte(tc.body))
			if code != 400 || ecode != apiv1.CodeInvalidArgument {
				t.Errorf("%d %s %s", code, ecode, b)
			}
			var m apiv1.ErrorBody
			if json.Unmarshal(b, &m); m.Error.Message == "" {
				t.Error("no message")
			}
		})
	}
	ctx := context.Background()
	if fs, _ := e.be.Functions.List(ctx, e.ns); len(fs) != 1 {
		t.Errorf("functions: %v", fs)
	}
	if ts, _ := e.be.Triggers.List(ctx, e.ns); len(ts) != 0 {
		t.Errorf("triggers: %v", ts)
	}
	if js, _ := e.be.Jobs.List(ctx, e.ns); len(js) != 0 {
		t.Errorf("jobs: %v", js)
	}
	// Fixed trigger fields cannot change through PATCH.
	e.c.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: "http", FunctionRef: "target"})
	for _, body := range []string{`{"enabled":false,"type":"cron"}`, `{"enabled":false,"function_ref":"other"}`, `{}`, `{"enabled":"no"}`} {
		if code, ecode, b := e.raw("PATCH", base+"/triggers/web", e.token, "application/json", []byte(body)); code != 400 || ecode != apiv1.CodeInvalidArgument {
			t.Errorf("PATCH %s: %d %s %s", body, code, ecode, b)
		}
	}
	if tr, _ := e.c.GetTrigger(ctx, "web"); !tr.IsEnabled() || tr.Type != "http" {
		t.Errorf("trigger changed: %+v", tr)
	}
}

func TestBadUploads(t *testing.T) { eachBackend(t, testBadUploads) }

func testBadUploads(t *testing.T, backend string) {
	e := newEnvOn(t, backend, apiUploadLimit(64<<10))
	e.ensure()
	e.function("f")
	zeros := strings.Repeat("0", 8<<20)
	valid := zipOf(t, map[string]string{"handler.py": "x"})
	for _, tc := range []struct {
		name  string
		ctype string
		body  []byte
		code  int
		ecode string
	}{
		{"zip slip", "application/zip", zipOf(t, map[string]string{"../../etc/cron.d/evil": "x"}), 400, apiv1.CodeInvalidArchive},
		{"absolute path", "application/zip", zipOf(t, map[string]string{"/etc/passwd": "x"}), 400, apiv1.CodeInvalidArchive},
		{"symlink", "application/zip", zipOf(t, map[string]string{"passwd@link": "/etc/passwd"}), 400, apiv1.CodeInvalidArchive},
		{"zip bomb", "application/zip", zipOf(t, map[string]string{"zeros": zeros}), 400, apiv1.CodeInvalidArchive},
		{"not a zip", "application/zip", []byte("this is plain text"), 400, apiv1.CodeInvalidArchive},
		{"empty body", "application/zip", nil, 400, apiv1.CodeInvalidArchive},
		{"empty zip", "application/zip", zipOf(t, nil), 400, apiv1.CodeInvalidArchive},
		{"truncated zip", "application/zip", valid[:len(valid)/2], 400, apiv1.CodeInvalidArchive},
		{"oversize upload", "application/zip", bytes.Repeat([]byte("x"), 65<<10), 413, apiv1.CodePayloadTooLarge},
		{"wrong content type", "text/plain", valid, 400, apiv1.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ecode, b := e.raw("POST", "/v1/namespaces/"+e.ns+"/functions/f/upload", e.token, tc.ctype, tc.body)
			if code != tc.code || ecode != tc.ecode {
				t.Errorf("%d %s %s; want %d %s", code, ecode, b, tc.code, tc.ecode)
			}
			e.assertNoCode(t)
			if f, _ := e.c.GetFunction(context.Background(), "f"); f.Status.CodeSHA256 != "" {
				t.Errorf("the function recorded code %s", f.Status.CodeSHA256)
			}
		})
	}
	t.Run("oversize without Content-Length", func(t *testing.T) {
		req, _ := http.NewRequest("POST", e.url+"/v1/namespaces/"+e.ns+"/functions/f/upload", &chunked{n: 100 << 10})
		req.Header.Set("Authorization", "Bearer "+e.token)
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

// chunked is a body of unknown length (sent chunked).
type chunked struct{ n int }

func (c *chunked) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errEOF
	}
	k := min(len(p), c.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	c.n -= k
	return k, nil
}
