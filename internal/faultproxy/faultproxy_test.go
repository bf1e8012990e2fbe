package faultproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/faultproxy"
)

func TestProxy(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	}))
	defer target.Close()
	p, err := faultproxy.Start("127.0.0.1", target.URL, faultproxy.WithMethods("PUT", "POST", "PATCH"), faultproxy.WithStatus(500))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(method string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, p.URL()+"/v2/x", strings.NewReader("body"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := send("PUT"); code != 200 || body != "PUT /v2/x body" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	mu.Lock()
	if len(hosts) != 1 || hosts[0] != p.Addr() {
		t.Errorf("the target saw Host %v, want the proxy's %s", hosts, p.Addr())
	}
	mu.Unlock()

	p.Fail()
	if !p.Failing() {
		t.Error("not failing after Fail")
	}
	if code, _ := send("GET"); code != 200 {
		t.Errorf("a GET while pushes fail: %d", code)
	}
	for _, m := range []string{"PUT", "POST", "PATCH"} {
		if code, body := send(m); code != 500 || !strings.Contains(body, "faultproxy") {
			t.Errorf("%s while failing: %d %q", m, code, body)
		}
	}
	if p.Refused() != 3 || p.Passed() != 2 {
		t.Errorf("refused %d passed %d, want 3 and 2", p.Refused(), p.Passed())
	}
	if r := p.Refusals(); len(r) != 3 || r[0].Method != "PUT" || r[2].Method != "PATCH" || r[0].Path != "/v2/x" || r[0].Time.IsZero() {
		t.Errorf("refusals %+v", r)
	}
	p.Heal()
	if code, _ := send("POST"); code != 200 || p.Failing() {
		t.Errorf("after Heal: %d, failing %v", code, p.Failing())
	}

	p.FailFor(300 * time.Millisecond)
	if code, _ := send("POST"); code != 500 {
		t.Errorf("during FailFor: %d", code)
	}
	time.Sleep(400 * time.Millisecond)
	if code, _ := send("POST"); code != 200 || p.Failing() {
		t.Errorf("after FailFor's time: %d, failing %v", code, p.Failing())
	}
	if p.Refused() != 4 {
		t.Errorf("refused %d, want 4", p.Refused())
	}
	p.SetStatus(403)
	p.Fail()
	if code, body := send("PATCH"); code != 403 || !strings.Contains(body, "403") {
		t.Errorf("after SetStatus(403): %d %q", code, body)
	}
	if r := p.Refusals(); r[3].Status != 500 || r[4].Status != 403 {
		t.Errorf("refusals %+v", r)
	}
}

func TestMatchAndDefaults(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()
	p, err := faultproxy.Start("127.0.0.1", target.URL, faultproxy.WithMatch(func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/bad") }),
		faultproxy.WithBody("application/json", `{"errors":[{"code":"UNAVAILABLE"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Fail()
	for path, want := range map[string]int{"/bad/1": 503, "/good": 200} {
		resp, err := http.Get(p.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
		if want == 503 && (resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), "UNAVAILABLE")) {
			t.Errorf("%s: %s %q", path, resp.Header.Get("Content-Type"), b)
		}
	}
	if _, err := faultproxy.Start("127.0.0.1", "not a url"); err == nil {
		t.Error("a target that is no URL was accepted")
	}
}

// The target's challenge and redirects name the proxy, not the target, as a registry's token realm
// must be on the host:port its clients use.
func TestAbsoluteURLsPointAtTheProxy(t *testing.T) {
	var target *httptest.Server
	target = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+target.URL+`/token",service="registry"`)
		w.Header().Set("Location", target.URL+"/v2/x/blobs/uploads/1")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer target.Close()
	p, err := faultproxy.Start("127.0.0.1", target.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	resp, err := http.Get(p.URL() + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("WWW-Authenticate"), `Bearer realm="`+p.URL()+`/token",service="registry"`; got != want {
		t.Errorf("WWW-Authenticate %q, want %q", got, want)
	}
	if got, want := resp.Header.Get("Location"), p.URL()+"/v2/x/blobs/uploads/1"; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
}
