package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// NPMPackage is a package an NPMRegistry serves: Files are its contents (package.json is made).
type NPMPackage struct {
	Name, Version string
	Files         map[string]string
}

// NPMRegistry is a minimal npm registry (packuments and tarballs) for packages made in a test:
// the npm registry itself is reachable from this machine but not from a test cluster's pods.
type NPMRegistry struct {
	URL      string
	Tarballs atomic.Int64 // tarball downloads, to tell an install from a cache hit
	// LastTarballClient is the address (IP) the last tarball download came from: a proxy's, when
	// installs go through one.
	LastTarballClient atomic.Value
	// auth, when set ("user:password"), is required of every request (RequireBasicAuth).
	auth      atomic.Value
	srv       *http.Server
	tarballs  map[string][]byte // path -> .tgz
	integrity map[string]string // name -> sha512 SRI of its tarball
	packs     map[string]NPMPackage
}

// StartNPMRegistry serves pkgs on host (a free port there) until Close.
func StartNPMRegistry(host string, pkgs ...NPMPackage) (*NPMRegistry, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	r := &NPMRegistry{URL: "http://" + ln.Addr().String(), tarballs: map[string][]byte{}, integrity: map[string]string{}, packs: map[string]NPMPackage{}}
	packuments := map[string][]byte{}
	for _, p := range pkgs {
		tgz, err := npmTarball(p)
		if err != nil {
			ln.Close()
			return nil, err
		}
		path := "/" + p.Name + "/-/" + p.Name + "-" + p.Version + ".tgz"
		r.tarballs[path] = tgz
		s512, s1 := sha512.Sum512(tgz), sha1.Sum(tgz)
		r.integrity[p.Name] = "sha512-" + base64.StdEncoding.EncodeToString(s512[:])
		r.packs[p.Name] = p
		packuments["/"+p.Name], _ = json.Marshal(map[string]any{
			"name": p.Name, "dist-tags": map[string]string{"latest": p.Version},
			"versions": map[string]any{p.Version: map[string]any{"name": p.Name, "version": p.Version,
				"dist": map[string]string{"tarball": r.URL + path, "shasum": hex.EncodeToString(s1[:]), "integrity": r.integrity[p.Name]}}},
		})
	}
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if want, _ := r.auth.Load().(string); want != "" {
			if u, p, ok := req.BasicAuth(); !ok || u+":"+p != want {
				w.Header().Set("WWW-Authenticate", `Basic realm="npm"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		if b, ok := r.tarballs[req.URL.Path]; ok {
			host, _, _ := net.SplitHostPort(req.RemoteAddr)
			r.LastTarballClient.Store(host)
			r.Tarballs.Add(1)
			w.Write(b)
			return
		}
		if b, ok := packuments[strings.Replace(req.URL.Path, "%2f", "/", 1)]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
			return
		}
		http.NotFound(w, req)
	})}
	go r.srv.Serve(ln)
	return r, nil
}

// Close stops serving.
func (r *NPMRegistry) Close() { r.srv.Close() }

// Manifests returns a package.json depending on the named packages and its lockfile (v3), as
// `npm install --package-lock-only` against this registry would write them.
func (r *NPMRegistry) Manifests(root string, deps ...string) (packageJSON, packageLock string) {
	sort.Strings(deps)
	want := map[string]string{}
	pkgs := map[string]any{}
	for _, d := range deps {
		p := r.packs[d]
		want[d] = p.Version
		pkgs["node_modules/"+d] = map[string]any{"version": p.Version, "resolved": r.URL + "/" + d + "/-/" + d + "-" + p.Version + ".tgz",
			"integrity": r.integrity[d]}
	}
	pj, _ := json.Marshal(map[string]any{"name": root, "version": "1.0.0", "dependencies": want})
	pkgs[""] = map[string]any{"name": root, "version": "1.0.0", "dependencies": want}
	lock, _ := json.MarshalIndent(map[string]any{"name": root, "version": "1.0.0", "lockfileVersion": 3, "requires": true, "packages": pkgs}, "", "  ")
	return string(pj), string(lock)
}

func npmTarball(p NPMPackage) ([]byte, error) {
	files := map[string]string{"package.json": `{"name":"` + p.Name + `","version":"` + p.Version + `","main":"index.js"}`}
	for n, b := range p.Files {
		files[n] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(499162500, 0)}); err != nil {
			return nil, err
		}
		tw.Write([]byte(files[n]))
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RequireBasicAuth makes the registry answer 401 to requests without user:password, and returns
// its URL with them (what an index URL with credentials looks like).
func (r *NPMRegistry) RequireBasicAuth(user, password string) string {
	r.auth.Store(user + ":" + password)
	return strings.Replace(r.URL, "://", "://"+user+":"+password+"@", 1)
}
