package testenv

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PipIndex is a PEP 503 simple index serving files a test adds (PyPI is unreachable here); links
// carry the file's sha256, as PyPI's do.
type PipIndex struct {
	// URL is the index as pip's --index-url names it (…/simple), without credentials.
	URL string
	// Lookups counts requests for a package's page (pip resolving it).
	Lookups atomic.Int64
	srv     *http.Server
	mu      sync.Mutex
	pkgs    map[string][2]any // name -> {file name, bytes}
	auth    string            // "user:password" required when set
}

// StartPipIndex serves on host (a free port there) until Close.
func StartPipIndex(host string) (*PipIndex, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	ix := &PipIndex{URL: "http://" + ln.Addr().String() + "/simple", pkgs: map[string][2]any{}}
	ix.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(ix.serve)}
	go ix.srv.Serve(ln)
	return ix, nil
}

func (ix *PipIndex) serve(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	auth := ix.auth
	ix.mu.Unlock()
	if auth != "" {
		if u, p, ok := r.BasicAuth(); !ok || u+":"+p != auth {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch {
	case len(parts) == 2 && parts[0] == "simple":
		ix.Lookups.Add(1)
		if f, ok := ix.pkgs[parts[1]]; ok {
			sum := sha256.Sum256(f[1].([]byte))
			fmt.Fprintf(w, "<html><body><a href=\"/files/%s#sha256=%s\">%s</a></body></html>", f[0], hex.EncodeToString(sum[:]), f[0])
			return
		}
	case len(parts) == 2 && parts[0] == "files":
		for _, f := range ix.pkgs {
			if f[0] == parts[1] {
				w.Write(f[1].([]byte))
				return
			}
		}
	}
	http.NotFound(w, r)
}

// Add serves file (a wheel or sdist named file) as package name's only release.
func (ix *PipIndex) Add(name, file string, data []byte) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.pkgs[name] = [2]any{file, data}
}

// RequireBasicAuth makes the index answer 401 without user:password and returns its URL with them.
func (ix *PipIndex) RequireBasicAuth(user, password string) string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.auth = user + ":" + password
	return strings.Replace(ix.URL, "://", "://"+user+":"+password+"@", 1)
}

// Close stops the index.
func (ix *PipIndex) Close() { ix.srv.Close() }

// Wheel builds a pure-Python wheel in memory (PyPI is unreachable here; pip installs it from a
// PipIndex): package pkg at version, whose pkg/__init__.py is body. It returns the wheel's file
// name (pkg-version-py3-none-any.whl) and bytes, for PipIndex.Add.
func Wheel(pkg, version, body string) (string, []byte) {
	dist := pkg + "-" + version + ".dist-info"
	files := [][2]string{
		{pkg + "/__init__.py", body},
		{dist + "/METADATA", "Metadata-Version: 2.1\nName: " + pkg + "\nVersion: " + version + "\n"},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: sless-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{dist + "/top_level.txt", pkg + "\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		w, _ := zw.Create(f[0])
		w.Write([]byte(f[1]))
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString(dist + "/RECORD,,\n")
	w, _ := zw.Create(dist + "/RECORD")
	w.Write([]byte(record.String()))
	zw.Close()
	return pkg + "-" + version + "-py3-none-any.whl", buf.Bytes()
}
