package api_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/api/codestore"
	"github.com/sless-dev/sless/api/kubestore"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/operator/resources"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// resolver routes functions to test upstreams.
type resolver struct {
	mu sync.Mutex
	m  map[string]*url.URL
}

func (r *resolver) set(ns, name, raw string) {
	u, _ := url.Parse(raw)
	r.mu.Lock()
	r.m[ns+"/"+name] = u
	r.mu.Unlock()
}

func (r *resolver) Resolve(_ context.Context, ns, name string) (*url.URL, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.m[ns+"/"+name]; ok {
		return u, nil
	}
	return nil, &api.NotReadyError{Reason: "no instance running"}
}

type env struct {
	t        *testing.T
	url      string
	srv      *api.Server
	be       api.Backend
	subject  string
	codeDir  string
	resolver *resolver
	token    string
	ns       string
	c        *client.Client
}

// The stores the API runs on: the single host's (memstore, as sless up keeps them) and the
// Kubernetes backend's (kubestore on the sless CRDs, on a real kube-apiserver). Route tests run
// on both through eachBackend, so the two backends answer every route the same way.
const (
	onMemstore  = "memstore"
	onKubestore = "kubestore"
)

var sharedKube kubetest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	sharedKube.Stop()
	os.Exit(code)
}

// eachBackend runs test once per backend, as subtests named after it.
func eachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range []string{onMemstore, onKubestore} {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

var tenants atomic.Int64

// newEnv serves the API with in-memory stores, a real directory code store and an HS256 verifier.
func newEnv(t *testing.T, opts ...api.Option) *env { return newEnvOn(t, onMemstore, opts...) }

// newEnvOn is newEnv on the given backend.
func newEnvOn(t *testing.T, backend string, opts ...api.Option) *env {
	t.Helper()
	v, err := auth.New(auth.WithHS256Secret(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	codeDir := t.TempDir()
	code, err := codestore.NewDir(codeDir)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, backend, code, codeDir, v, opts...)
}

func newEnvWith(t *testing.T, kind string, code api.CodeStore, codeDir string, v *auth.Verifier, opts ...api.Option) *env {
	t.Helper()
	res := &resolver{m: map[string]*url.URL{}}
	var backend api.Backend
	subject := "alice@example.com"
	switch kind {
	case onMemstore:
		backend, _ = memstore.Backend(code, res)
	case onKubestore:
		backend = kubestore.New(sharedKube.Get(t).Client, code, resources.TenantConfig{OperatorNamespace: "sless-system",
			DockerConfigJSON: []byte(`{"auths":{}}`)}, res)
		// One API server for the whole binary, where a deleted namespace stays Terminating (no
		// namespace controller): every env is its own tenant.
		subject = fmt.Sprintf("alice-%d@example.com", tenants.Add(1))
	default:
		t.Fatalf("unknown backend %q", kind)
	}
	opts = append([]api.Option{api.WithVerifier(v), api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))),
		api.WithTempDir(t.TempDir())}, opts...)
	s, err := api.New(backend, opts...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Config = api.NewHTTPServer("", s.Handler(), nil)
	hs.Start()
	t.Cleanup(hs.Close)
	token, err := auth.IssueHS256(testSecret, subject, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(hs.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, url: hs.URL, srv: s, be: backend, subject: subject, codeDir: codeDir, resolver: res, token: token, ns: c.Namespace(), c: c}
}

// raw sends a request with the given token (empty: none) and returns status, error code and body.
func (e *env) raw(method, path, token, ctype string, body []byte) (int, string, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env apiv1.ErrorBody
	json.Unmarshal(b, &env)
	return resp.StatusCode, env.Error.Code, b
}

func (e *env) ensure() {
	e.t.Helper()
	if err := e.c.EnsureNamespace(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) function(name string) *apiv1.Function {
	e.t.Helper()
	f, err := e.c.CreateFunction(context.Background(), apiv1.Function{Name: name, Runtime: "python3.11"})
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// ready marks a function Ready (the backend's job) and routes it to upstream.
func (e *env) ready(name, upstream string) {
	e.t.Helper()
	_, err := e.be.Functions.Update(context.Background(), e.ns, name, func(f *apiv1.Function) error {
		f.Status.Phase = apiv1.PhaseReady
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.resolver.set(e.ns, name, upstream)
}

// storedFiles lists what the code store holds.
func (e *env) storedFiles() []string {
	var out []string
	filepath.Walk(e.codeDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(e.codeDir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func zipOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, body := range files {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate}
		if strings.HasSuffix(n, "@link") {
			h.Name = strings.TrimSuffix(n, "@link")
			h.SetMode(os.ModeSymlink | 0o777)
		}
		w, _ := zw.CreateHeader(h)
		w.Write([]byte(body))
	}
	zw.Close()
	return buf.Bytes()
}
