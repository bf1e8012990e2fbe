package api_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/auth"
)

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
	v, err := auth.New(auth.WithJWKS(keys.URL), auth.WithAnyAudience(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(apitest.Sign(t, jwt.SigningMethodRS256, key, apitest.Claims("alice", nil), "k1")); err != nil {
		t.Errorf("valid JWKS token: %v", err)
	}
	start := time.Now()
	if _, err := v.Verify(apitest.Sign(t, jwt.SigningMethodRS256, key, apitest.Claims("alice", nil), "unknown")); err == nil {
		t.Error("unknown kid accepted")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("unknown kid took %v", d)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	if _, err := v.Verify(apitest.Sign(t, jwt.SigningMethodRS256, other, apitest.Claims("alice", nil), "k1")); err == nil {
		t.Error("token signed by another key with a known kid accepted")
	}

	// A JWKS URL names a shared identity provider: no audience, no verifier (unless asked for).
	if _, err := auth.New(auth.WithJWKS(keys.URL)); !errors.Is(err, auth.ErrNoAudience) {
		t.Errorf("JWKS without an audience: %v, want ErrNoAudience", err)
	}
	scoped, err := auth.New(auth.WithJWKS(keys.URL), auth.WithAudience("sless"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scoped.Verify(apitest.Sign(t, jwt.SigningMethodRS256, key, apitest.Claims("alice", map[string]any{"aud": "sless"}), "k1")); err != nil {
		t.Errorf("a token for sless: %v", err)
	}
	if _, err := scoped.Verify(apitest.Sign(t, jwt.SigningMethodRS256, key, apitest.Claims("alice", map[string]any{"aud": "billing"}), "k1")); err == nil {
		t.Error("a token the provider issued to another application was accepted")
	}
}
