package apitest

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

// Backend is a backend under test.
type Backend struct {
	Name string
	// New returns fresh stores on code and resolver, and the controller that writes their status.
	New func(t testing.TB, code codestore.Store, resolver objects.Resolver) (objects.Backend, Controller)
	// OwnLogs serves the Logs New returns instead of FakeLogs (Env.Logs is then unused): a
	// backend's test of the API on its real logs.
	OwnLogs bool
}

// Controller writes status as the backend's controller does (marking the current generation
// observed).
type Controller interface {
	SetFunctionStatus(ns, name string, f func(*lifecycle.FunctionStatus)) error
	SetJobStatus(ns, name string, f func(*apiv1.JobStatus)) error
}

// Memstore is the in-memory backend of unit tests.
var Memstore = Backend{Name: "memstore", New: func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, Controller) {
	b, st := memstore.Backend(code, r)
	b.RuntimeImages = objects.RuntimeImageMap{"python3.11": "registry.test/sless/runtime/python3.11@sha256:" + strings.Repeat("1", 64),
		"nodejs22": "registry.test/sless/runtime/nodejs22@sha256:" + strings.Repeat("2", 64)}
	return b, memController{st}
}}

type memController struct{ st *memstore.Stores }

func (m memController) SetFunctionStatus(ns, name string, f func(*lifecycle.FunctionStatus)) error {
	return m.st.Functions.SetStatus(ns, name, f)
}

func (m memController) SetJobStatus(ns, name string, f func(*apiv1.JobStatus)) error {
	return m.st.Jobs.SetStatus(ns, name, f)
}

// Secret is the HS256 secret tokens of the default verifier are signed with.
var Secret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// Resolver routes functions to test upstreams.
type Resolver struct {
	mu sync.Mutex
	m  map[string]*url.URL
}

// NewResolver routes nothing yet.
func NewResolver() *Resolver { return &Resolver{m: map[string]*url.URL{}} }

// Set routes ns/name to raw.
func (r *Resolver) Set(ns, name, raw string) {
	u, _ := url.Parse(raw)
	r.mu.Lock()
	r.m[ns+"/"+name] = u
	r.mu.Unlock()
}

// Unset routes ns/name nowhere: it has no instance.
func (r *Resolver) Unset(ns, name string) {
	r.mu.Lock()
	delete(r.m, ns+"/"+name)
	r.mu.Unlock()
}

// Resolve implements objects.Resolver.
func (r *Resolver) Resolve(_ context.Context, ns, name string) (*url.URL, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u, ok := r.m[ns+"/"+name]; ok {
		return u, nil
	}
	return nil, &objects.NotReadyError{Reason: "no instance running"}
}

// Env is an API server on a backend, and a client of one tenant.
type Env struct {
	T        testing.TB
	URL      string
	Srv      *api.Server
	Be       objects.Backend
	Ctrl     Controller
	Subject  string
	CodeDir  string
	Resolver *Resolver
	Token    string
	NS       string
	C        *client.Client
	// Logs are the instances' logs the API reads (the backend's own are replaced).
	Logs *FakeLogs

	backend  string // Backend.Name
	verifier *auth.Verifier
}

var tenants atomic.Int64

// NewEnv serves the API on b with a directory code store and an HS256 verifier.
func NewEnv(t testing.TB, b Backend, opts ...api.Option) *Env {
	t.Helper()
	v, err := auth.New(auth.WithHS256Secret(Secret))
	if err != nil {
		t.Fatal(err)
	}
	codeDir := t.TempDir()
	code, err := codestore.NewDir(codeDir)
	if err != nil {
		t.Fatal(err)
	}
	return NewEnvWith(t, b, code, codeDir, v, opts...)
}

// NewEnvWith is NewEnv with a given code store (whose files are under codeDir, "" if none) and
// verifier. Every Env is its own tenant: backends may share state between tests.
func NewEnvWith(t testing.TB, b Backend, code codestore.Store, codeDir string, v *auth.Verifier, opts ...api.Option) *Env {
	t.Helper()
	res := NewResolver()
	backend, ctrl := b.New(t, code, res)
	// The API's merging and following of instance logs is tested here on lines the test makes;
	// each backend's reading of real instances is tested with real instances (local, e2e/k8s).
	logs := NewFakeLogs()
	if !b.OwnLogs {
		backend.Logs = logs
	}
	subject := fmt.Sprintf("alice-%d@example.com", tenants.Add(1))
	s, url := serve(t, b.Name, backend, v, opts...)
	token, err := auth.IssueHS256(Secret, subject, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, URL: url, Srv: s, Be: backend, Ctrl: ctrl, Subject: subject, CodeDir: codeDir, Resolver: res, Token: token, NS: c.Namespace(), C: c,
		Logs: logs, backend: b.Name, verifier: v}
}

// serve starts an API server on backend, checked against the OpenAPI document, and returns it
// and its URL.
func serve(t testing.TB, name string, backend objects.Backend, v *auth.Verifier, opts ...api.Option) (*api.Server, string) {
	t.Helper()
	opts = append([]api.Option{api.WithVerifier(v), api.WithTempDir(t.TempDir())}, opts...)
	s, err := api.New(backend, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if _, bench := t.(*testing.B); !bench {
		h = checkOpenAPI(t.Errorf, OpenAPIStats(name), h) // see openapi.go
	}
	hs := httptest.NewUnstartedServer(h)
	hs.Config = api.NewHTTPServer("", h, nil)
	hs.Start()
	t.Cleanup(hs.Close)
	return s, hs.URL
}

// Restarted is the same tenant on another API server of the same stores, made with opts (and
// the verifier of e): the install restarted with other flags, its functions kept.
func (e *Env) Restarted(opts ...api.Option) *Env {
	e.T.Helper()
	s, url := serve(e.T, e.backend, e.Be, e.verifier, opts...)
	c, err := client.New(url, e.Token)
	if err != nil {
		e.T.Fatal(err)
	}
	o := *e
	o.Srv, o.URL, o.C = s, url, c
	return &o
}

// Tenant is another caller of the same server, with a namespace of its own.
func (e *Env) Tenant() *Env {
	e.T.Helper()
	subject := fmt.Sprintf("bob-%d@example.com", tenants.Add(1))
	token, err := auth.IssueHS256(Secret, subject, time.Hour)
	if err != nil {
		e.T.Fatal(err)
	}
	c, err := client.New(e.URL, token)
	if err != nil {
		e.T.Fatal(err)
	}
	o := *e
	o.Subject, o.Token, o.NS, o.C = subject, token, c.Namespace(), c
	return &o
}

// Raw sends a request with the given token (empty: none) and returns status, error code and body.
func (e *Env) Raw(method, path, token, ctype string, body []byte) (int, string, []byte) {
	e.T.Helper()
	req, _ := http.NewRequest(method, e.URL+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env apiv1.ErrorBody
	json.Unmarshal(b, &env)
	return resp.StatusCode, env.Error.Code, b
}

// Ensure creates the tenant's namespace.
func (e *Env) Ensure() {
	e.T.Helper()
	if err := e.C.EnsureNamespace(context.Background()); err != nil {
		e.T.Fatal(err)
	}
}

// Function creates a python function.
func (e *Env) Function(name string) *apiv1.Function {
	e.T.Helper()
	f, err := e.C.CreateFunction(context.Background(), apiv1.Function{Name: name, Runtime: "python3.11"})
	if err != nil {
		e.T.Fatal(err)
	}
	return f
}

// Ready marks a function Ready (the backend's job) and routes it to upstream.
func (e *Env) Ready(name, upstream string) {
	e.T.Helper()
	if err := e.Ctrl.SetFunctionStatus(e.NS, name, func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady }); err != nil {
		e.T.Fatal(err)
	}
	e.Resolver.Set(e.NS, name, upstream)
}

// StoredFiles lists what the code store holds.
func (e *Env) StoredFiles() []string {
	var out []string
	if e.CodeDir == "" {
		return nil
	}
	filepath.Walk(e.CodeDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(e.CodeDir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// ZipOf makes a zip of files; a name ending in "@link" becomes a symlink to its content.
func ZipOf(t testing.TB, files map[string]string) []byte {
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
