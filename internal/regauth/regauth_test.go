package regauth

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKeysRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	k, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SigningKeyFile, SecretFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	again, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Platform() != k.Platform() || !bytes.Equal(again.JWKS(), k.JWKS()) {
		t.Error("keys loaded back differ from the ones saved")
	}
	other, _ := Generate()
	if other.Platform().Password == k.Platform().Password || other.TenantPull("a").Password == k.TenantPull("a").Password {
		t.Error("two key sets derive the same password")
	}
	if k.TenantPull("a").Password == k.TenantPull("b").Password {
		t.Error("two tenants share a password")
	}
	os.WriteFile(filepath.Join(dir, SecretFile), []byte("abcd\n"), 0o600)
	if _, err := Load(dir); err == nil {
		t.Error("a 2-byte secret loaded")
	}
}

func TestPolicyRefusesMalformedUsers(t *testing.T) {
	for _, u := range []string{"", "pull.", "pull.sless", "pull.A", "pull.a/b", "pull.-a", "deps.", "deps.abc.1", "deps." + strings.Repeat("a", 64), "deps." + strings.Repeat("a", 64) + ".x", "root"} {
		if policyFor(u) != nil {
			t.Errorf("user %q has a policy", u)
		}
	}
	p := policyFor("pull.team-a")
	if got := p("repository", "team-ab/fn", time.Now()); got != nil {
		t.Errorf("team-a may %v on team-ab/fn", got)
	}
}

func TestPasswordGrant(t *testing.T) {
	k, _ := Generate()
	srv := httptest.NewServer(k.TokenHandler())
	defer srv.Close()
	c := k.TenantPull("team-a")
	form := url.Values{"grant_type": {"password"}, "username": {c.Username}, "password": {c.Password},
		"service": {Service}, "scope": {"repository:team-a/fn:pull,push repository:team-b/fn:pull"}, "client_id": {"containerd-client"}}
	resp, err := http.PostForm(srv.URL, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 || body.AccessToken == "" {
		t.Fatalf("password grant: %d %v", resp.StatusCode, err)
	}
	form.Set("grant_type", "refresh_token")
	if resp, _ := http.PostForm(srv.URL, form); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("refresh_token grant: %d, want 400 (containerd then falls back to GET)", resp.StatusCode)
	}
	form.Set("grant_type", "password")
	form.Set("password", "x")
	if resp, _ := http.PostForm(srv.URL, form); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", resp.StatusCode)
	}
}
