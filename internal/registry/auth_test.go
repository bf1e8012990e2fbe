package registry_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
)

const (
	tenantA = "sless-00000000000000aa"
	tenantB = "sless-00000000000000bb"
)

func startAuth(t *testing.T) (*registry.Server, *regauth.Keys) {
	t.Helper()
	keys, err := regauth.Generate()
	if err != nil {
		t.Fatal(err)
	}
	s, err := registry.Start(context.Background(), registry.Config{RootDir: t.TempDir(), Auth: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, keys
}

func push(t *testing.T, ref string, c regauth.Credential) error {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return remote.Write(r, img, remote.WithAuth(c.Authenticator()))
}

func pull(ref string, auth authn.Authenticator) (v1.Image, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(r, remote.WithAuth(auth))
	if err != nil {
		return nil, err
	}
	_, err = img.Layers() // fetch the manifest and config, the blobs a pull reads
	if err == nil {
		_, err = img.ConfigFile()
	}
	return img, err
}

func denied(t *testing.T, what string, err error) {
	t.Helper()
	var te *transport.Error
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
	} else if !errors.As(err, &te) || (te.StatusCode != http.StatusUnauthorized && te.StatusCode != http.StatusForbidden) {
		t.Errorf("%s: %v, want 401/403 from the registry", what, err)
	}
}

// TestTokenAuth exercises Distribution's token authentication with sless as the issuer, through
// go-containerregistry's real token flow, identity by identity.
func TestTokenAuth(t *testing.T) {
	s, keys := startAuth(t)
	reg := s.Addr()
	platform, node := keys.Platform(), keys.Node()
	pullA, pullB := keys.TenantPull(tenantA), keys.TenantPull(tenantB)

	// The platform pushes a function image for each tenant, a runtime image and a deps layer.
	for _, ref := range []string{reg + "/" + tenantA + "/fn:latest", reg + "/" + tenantB + "/fn:latest", reg + "/sless/runtime-python3.11:latest", reg + "/pause:3.10"} {
		if err := push(t, ref, platform); err != nil {
			t.Fatalf("platform push %s: %v", ref, err)
		}
	}
	key := strings.Repeat("ab", 32)
	depsRef := reg + "/" + regauth.DepsRepo(key) + ":latest"
	if err := push(t, depsRef, keys.DepsPush(key, time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("deps push with the key's credential: %v", err)
	}

	// A tenant pulls its own images and system images, nothing else.
	if _, err := pull(reg+"/"+tenantA+"/fn:latest", pullA.Authenticator()); err != nil {
		t.Errorf("tenant A pulling its own image: %v", err)
	}
	_, err := pull(reg+"/"+tenantB+"/fn:latest", pullA.Authenticator())
	denied(t, "tenant A pulling tenant B's image", err)
	_, err = pull(depsRef, pullA.Authenticator())
	denied(t, "tenant A pulling a deps layer", err)
	if _, err := pull(reg+"/sless/runtime-python3.11:latest", pullA.Authenticator()); err != nil {
		t.Errorf("tenant A pulling a runtime image (its deps Jobs run it): %v", err)
	}
	denied(t, "tenant A pushing into its own repository", push(t, reg+"/"+tenantA+"/fn:latest", pullA))
	denied(t, "tenant A pushing into tenant B's repository", push(t, reg+"/"+tenantB+"/fn:latest", pullA))
	denied(t, "tenant B overwriting a deps tag", push(t, depsRef, pullB))
	r, _ := name.ParseReference(reg+"/"+tenantA+"/fn:latest", name.Insecure)
	denied(t, "tenant A deleting its own tag", remote.Delete(r, remote.WithAuth(pullA.Authenticator())))
	regName, _ := name.NewRegistry(reg, name.Insecure)
	_, err = remote.CatalogPage(regName, "", 100, remote.WithAuth(pullA.Authenticator()))
	denied(t, "tenant A listing the catalog", err)
	_, err = remote.List(r.Context(), remote.WithAuth(pullB.Authenticator()))
	denied(t, "tenant B listing tenant A's tags", err)

	// A node pulls system images only.
	if _, err := pull(reg+"/pause:3.10", node.Authenticator()); err != nil {
		t.Errorf("node pulling pause: %v", err)
	}
	if _, err := pull(reg+"/sless/runtime-python3.11:latest", node.Authenticator()); err != nil {
		t.Errorf("node pulling a runtime image: %v", err)
	}
	_, err = pull(reg+"/"+tenantA+"/fn:latest", node.Authenticator())
	denied(t, "node pulling a tenant's image", err)
	_, err = pull(depsRef, node.Authenticator())
	denied(t, "node pulling a deps layer", err)
	denied(t, "node pushing", push(t, reg+"/sless/runtime-python3.11:latest", node))

	// A deps credential pushes its own key only, and only until it expires.
	other := strings.Repeat("cd", 32)
	denied(t, "deps credential pushing another key", push(t, reg+"/"+regauth.DepsRepo(other)+":latest", keys.DepsPush(key, time.Now().Add(time.Hour))))
	denied(t, "deps credential pushing a function image", push(t, reg+"/"+tenantA+"/fn:latest", keys.DepsPush(key, time.Now().Add(time.Hour))))
	denied(t, "expired deps credential", push(t, depsRef, keys.DepsPush(key, time.Now().Add(-time.Minute))))
	denied(t, "deps credential valid for longer than allowed", push(t, depsRef, keys.DepsPush(key, time.Now().Add(regauth.MaxDepsTTL+time.Hour))))

	// Made-up credentials, and real names with a wrong password.
	for _, c := range []regauth.Credential{{Username: "sless", Password: "guess"}, {Username: "pull." + tenantA, Password: pullB.Password}, {Username: "admin", Password: "admin"}} {
		_, err := pull(reg+"/"+tenantA+"/fn:latest", c.Authenticator())
		denied(t, "forged credential "+c.Username, err)
	}
	_, err = pull(reg+"/"+tenantA+"/fn:latest", authn.Anonymous)
	denied(t, "anonymous pull", err)

	// The platform reads the catalog and deletes.
	repos, err := remote.CatalogPage(regName, "", 100, remote.WithAuth(platform.Authenticator()))
	if err != nil || len(repos) != 5 {
		t.Errorf("platform catalog = %v, %v; want 5 repositories", repos, err)
	}
	if err := remote.Delete(r, remote.WithAuth(platform.Authenticator())); err != nil {
		t.Errorf("platform delete: %v", err)
	}
}

// TestAnonymousAndForgedRequests speaks HTTP directly: what a handler with curl would send.
func TestAnonymousAndForgedRequests(t *testing.T) {
	s, keys := startAuth(t)
	base := "http://" + s.Addr()
	do := func(method, path, bearer string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := do("POST", "/v2/"+tenantA+"/fn/blobs/uploads/", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous blob upload: %d, want 401", resp.StatusCode)
	}
	ch := resp.Header.Get("WWW-Authenticate")
	for _, want := range []string{`Bearer realm="` + base + `/token"`, `service="sless-registry"`, `scope="repository:` + tenantA + `/fn:`} {
		if !strings.Contains(ch, want) {
			t.Errorf("challenge %q lacks %s", ch, want)
		}
	}
	for _, p := range []string{"/v2/", "/v2/_catalog", "/v2/" + tenantB + "/fn/tags/list"} {
		if resp := do("GET", p, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401", p, resp.StatusCode)
		}
	}

	// The token endpoint hands out nothing without credentials.
	tokenURL := base + "/token?service=sless-registry&scope=" + url.QueryEscape("repository:"+tenantA+"/fn:pull,push")
	for _, c := range []*regauth.Credential{nil, {Username: "sless", Password: ""}, {Username: "pull." + tenantA, Password: keys.TenantPull(tenantB).Password}} {
		req, _ := http.NewRequest("GET", tokenURL, nil)
		if c != nil {
			req.SetBasicAuth(c.Username, c.Password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token for %+v: %d, want 401", c, resp.StatusCode)
		}
	}

	// A tenant's token carries pull only, though it asked for push.
	req, _ := http.NewRequest("GET", tokenURL, nil)
	pa := keys.TenantPull(tenantA)
	req.SetBasicAuth(pa.Username, pa.Password)
	tr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Token string }
	json.NewDecoder(tr.Body).Decode(&body)
	tr.Body.Close()
	var cl struct {
		Access []regauth.Access `json:"access"`
	}
	if _, _, err := jwt.NewParser().ParseUnverified(body.Token, jwt.MapClaims{}); err != nil {
		t.Fatalf("token %q: %v", body.Token, err)
	}
	parts := strings.Split(body.Token, ".")
	payload, _ := jwt.NewParser().DecodeSegment(parts[1])
	json.Unmarshal(payload, &cl)
	if len(cl.Access) != 1 || strings.Join(cl.Access[0].Actions, ",") != "pull" {
		t.Errorf("tenant token access = %+v, want pull only", cl.Access)
	}
	if resp := do("POST", "/v2/"+tenantA+"/fn/blobs/uploads/", body.Token); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("blob upload with a pull token: %d, want 401", resp.StatusCode)
	}

	// Tokens sless did not sign: another EC key with the right kid and claims, HS256 keyed with
	// the public JWKS, and "none".
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	kid := func() string {
		var jwks struct{ Keys []struct{ Kid string } }
		json.Unmarshal(keys.JWKS(), &jwks)
		return jwks.Keys[0].Kid
	}()
	allClaims := jwt.MapClaims{"iss": regauth.Issuer, "sub": "sless", "aud": regauth.Service,
		"exp": time.Now().Add(time.Hour).Unix(), "nbf": time.Now().Add(-time.Minute).Unix(),
		"access": []regauth.Access{{Type: "repository", Name: tenantA + "/fn", Actions: []string{"pull", "push"}}}}
	forge := func(m jwt.SigningMethod, key any) string {
		tok := jwt.NewWithClaims(m, allClaims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for what, tok := range map[string]string{
		"another key":     forge(jwt.SigningMethodES256, other),
		"HS256 with JWKS": forge(jwt.SigningMethodHS256, keys.JWKS()),
		"alg none":        forge(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType),
		"garbage":         "not.a.token",
	} {
		if resp := do("POST", "/v2/"+tenantA+"/fn/blobs/uploads/", tok); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("blob upload with a token signed by %s: %d, want 401", what, resp.StatusCode)
		}
	}
}
