package apitest

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// hostileUpstream answers every request with the headers a function could use against its
// neighbours on a shared origin, and reports the path, prefix and cookies it was sent.
func hostileUpstream(t *testing.T) (string, chan Seen) {
	up, ch := EchoUpstream(t)
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- Seen{Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone()}
		h := w.Header()
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Clear-Site-Data", `"*"`)
		h.Add("Set-Cookie", "a=1; Path=/; Domain=example.com; HttpOnly")
		h.Add("Set-Cookie", "b=2")
		h.Add("Set-Cookie", "c=3; Path="+r.Header.Get("X-Forwarded-Prefix")+"/sub")
		h.Add("Set-Cookie", "d=4; Path=/app; Secure")
		h.Add("Set-Cookie", "not a cookie")
		io.WriteString(w, "ok")
	})
	return up.URL, ch
}

func get(t *testing.T, url, host string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Cookie", "session=abc")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// testProxyConfinesResponses: on the origin every function shares, a function cannot register a
// service worker beyond itself, clear the others' storage, or set cookies for other paths or
// domains.
func testProxyConfinesResponses(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("page")
	up, ch := hostileUpstream(t)
	e.Ready("page", up)
	prefix := "/fn/" + e.NS + "/page"

	resp, body := get(t, e.URL+prefix+"/sw.js", "")
	<-ch
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	for _, h := range []string{"Service-Worker-Allowed", "Clear-Site-Data"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("%s: %q passed through", h, v)
		}
	}
	want := []string{
		"a=1; Path=" + prefix + "; HttpOnly",
		"b=2; Path=" + prefix,
		"c=3; Path=" + prefix + "/sub",
		"d=4; Path=" + prefix + "/app; Secure",
	}
	if got := resp.Header.Values("Set-Cookie"); !slices.Equal(got, want) {
		t.Errorf("Set-Cookie\n got %q\nwant %q", got, want)
	}
}

// testFunctionHosts: with a function domain, <name>--<ns>.<domain> is the function's own origin
// for every path; no host below the domain serves the API; /fn/ keeps working.
func testFunctionHosts(t *testing.T, bk Backend) {
	const domain = "fn.example.test"
	e := NewEnv(t, bk, api.WithFunctionDomain(domain))
	e.Ensure()
	e.Function("page")
	up, ch := hostileUpstream(t)
	e.Ready("page", up)
	host := "page--" + e.NS + "." + domain // runspec.FunctionHost

	// Any case and a port; the whole path (an API path too) is the function's.
	for _, h := range []string{host, strings.ToUpper(host) + ":443"} {
		resp, body := get(t, e.URL+"/v1/namespaces/"+e.NS+"/functions?x=1", h)
		got := <-ch
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%s: %d %q", h, resp.StatusCode, body)
		}
		if got.Path != "/v1/namespaces/"+e.NS+"/functions" || got.RawQuery != "x=1" || got.Header.Get("X-Forwarded-Prefix") != "" {
			t.Errorf("%s: the function saw %s ? %s prefix %q", h, got.Path, got.RawQuery, got.Header.Get("X-Forwarded-Prefix"))
		}
		if got.Header.Get("Cookie") != "session=abc" {
			t.Errorf("Cookie %q", got.Header.Get("Cookie"))
		}
		// Host-only cookies with the paths the function chose; the shared-origin headers dropped.
		want := []string{"a=1; Path=/; HttpOnly", "b=2", "c=3; Path=/sub", "d=4; Path=/app; Secure"}
		if got := resp.Header.Values("Set-Cookie"); !slices.Equal(got, want) {
			t.Errorf("Set-Cookie\n got %q\nwant %q", got, want)
		}
		if resp.Header.Get("Service-Worker-Allowed") != "" || resp.Header.Get("Clear-Site-Data") != "" {
			t.Errorf("shared-origin headers passed: %v", resp.Header)
		}
	}

	// Hosts below the domain that name no function answer 404 and never reach the API.
	for _, h := range []string{"ghost--" + e.NS + "." + domain, "nodashes." + domain, "a.page--" + e.NS + "." + domain, "--" + e.NS + "." + domain, "page--." + domain} {
		req, _ := http.NewRequest("GET", e.URL+"/v1/namespaces/"+e.NS+"/functions", nil)
		req.Host = h
		req.Header.Set("Authorization", "Bearer "+e.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(b), apiv1.CodeNotFound) {
			t.Errorf("host %s: %d %s", h, resp.StatusCode, b)
		}
	}
	// The API's own host (and the domain itself) still serves the API and /fn/.
	for _, h := range []string{"", domain} {
		req, _ := http.NewRequest("GET", e.URL+"/v1/namespaces/"+e.NS+"/functions", nil)
		if h != "" {
			req.Host = h
		}
		req.Header.Set("Authorization", "Bearer "+e.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("API on host %q: %d", h, resp.StatusCode)
		}
	}
	if resp, body := get(t, e.URL+"/fn/"+e.NS+"/page/", ""); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("/fn/ with a function domain: %d %q", resp.StatusCode, body)
	}
	<-ch
}
