package indexproxy_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sless-dev/sless/indexproxy"
)

func TestProxyAllowsIndexesAndAddsCredentials(t *testing.T) {
	var sawAuth []string
	index := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth = append(sawAuth, r.Header.Get("Authorization"))
		if u, p, ok := r.BasicAuth(); !ok || u != "ix" || p != "s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "simple index")
	}))
	defer index.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "canary") }))
	defer other.Close()
	tlsIndex := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls index") }))
	defer tlsIndex.Close()

	withCreds := strings.Replace(index.URL, "http://", "http://ix:s3cret@", 1) + "/simple"
	p, err := indexproxy.New([]string{withCreds}, []string{strings.TrimPrefix(tlsIndex.URL, "https://")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := indexproxy.Sanitize(withCreds); strings.Contains(got, "s3cret") || got != index.URL+"/simple" {
		t.Errorf("Sanitize = %s", got)
	}
	srv, err := indexproxy.Listen("127.0.0.1:0", p)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxyURL, _ := url.Parse("http://" + srv.Addr())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	get := func(u string, header ...string) (int, string) {
		req, _ := http.NewRequest("GET", u, nil)
		if len(header) == 2 {
			req.Header.Set(header[0], header[1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(index.URL + "/simple/six/"); code != 200 || body != "simple index" {
		t.Errorf("the index through the proxy: %d %s", code, body)
	}
	// The installer's own Authorization never reaches the index: the proxy's replaces it.
	if code, _ := get(index.URL+"/simple/", "Authorization", "Basic eDp5"); code != 200 || sawAuth[len(sawAuth)-1] != "Basic aXg6czNjcmV0" {
		t.Errorf("credentials upstream: %d %v", code, sawAuth)
	}
	if code, body := get(other.URL + "/"); code != http.StatusForbidden || strings.Contains(body, "canary") {
		t.Errorf("another host through the proxy: %d %s", code, body)
	}
	if code, body := get(tlsIndex.URL + "/"); code != 200 || body != "tls index" {
		t.Errorf("an allowed https host (CONNECT): %d %s", code, body)
	}
	// CONNECT to a host that is not allowed, e.g. the index's port on another address.
	if code, _ := get(strings.Replace(tlsIndex.URL, "127.0.0.1", "localhost", 1) + "/"); code == 200 {
		t.Error("CONNECT to a host not allowed went through")
	}
	// Origin-form requests (the proxy used as a server) are refused.
	resp, err := http.Get("http://" + srv.Addr() + "/simple/")
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request: %v %v", resp, err)
	}
}

func TestProxyRefusesBadIndexURLs(t *testing.T) {
	for _, u := range []string{"ftp://x/", "http://", "::"} {
		if _, err := indexproxy.New([]string{u}, nil, nil); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}
