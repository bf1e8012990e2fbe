package regauth

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer and Service are the token's "iss" and "aud": the registry's configuration names them.
const (
	Issuer  = "sless"
	Service = "sless-registry"
	// TokenTTL is how long an issued token is valid; clients fetch a new one on expiry.
	TokenTTL = 5 * time.Minute

	maxScopes = 32
)

// Access is one granted resource in a token (the "access" claim of Docker's token format).
type Access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

type claims struct {
	jwt.RegisteredClaims
	Access []Access `json:"access"`
}

// TokenHandler serves the token endpoint (the realm in the registry's challenge): GET with basic
// credentials and ?service=&scope=…, as Docker clients, podman and go-containerregistry do, and
// the OAuth2 password grant (POST), which containerd tries first. A request without valid
// credentials is refused: there are no anonymous tokens.
func (k *Keys) TokenHandler() http.Handler { return &issuer{keys: k, now: time.Now} }

type issuer struct {
	keys *Keys
	now  func() time.Time
}

func (i *issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var user, pass, service string
	var scopes []string
	var ok bool
	switch r.Method {
	case http.MethodGet:
		user, pass, ok = r.BasicAuth()
		q := r.URL.Query()
		service, scopes = q.Get("service"), q["scope"]
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			tokenError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
			return
		}
		if r.PostForm.Get("grant_type") != "password" {
			// containerd falls back to GET on 400.
			tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "only the password grant is supported")
			return
		}
		user, pass, ok = r.PostForm.Get("username"), r.PostForm.Get("password"), true
		service = r.PostForm.Get("service")
		scopes = strings.Fields(r.PostForm.Get("scope"))
	default:
		w.Header().Set("Allow", "GET, POST")
		tokenError(w, http.StatusMethodNotAllowed, "invalid_request", "GET or POST")
		return
	}
	if service != "" && service != Service {
		tokenError(w, http.StatusBadRequest, "invalid_request", "unknown service")
		return
	}
	pol := policyFor(user)
	if !ok || pol == nil || !i.keys.check(user, pass) {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Service+`"`)
		tokenError(w, http.StatusUnauthorized, "invalid_client", "valid registry credentials are required")
		return
	}
	// One scope parameter may list several, space-separated (the spec allows both forms).
	var requested []string
	for _, s := range scopes {
		requested = append(requested, strings.Fields(s)...)
	}
	if len(requested) > maxScopes {
		tokenError(w, http.StatusBadRequest, "invalid_scope", "too many scopes")
		return
	}
	now := i.now()
	granted := []Access{}
	for _, s := range requested {
		a, ok := parseScope(s)
		if !ok {
			tokenError(w, http.StatusBadRequest, "invalid_scope", "malformed scope")
			return
		}
		allowed := pol(a.Type, a.Name, now)
		var acts []string
		for _, act := range a.Actions {
			if slices.Contains(allowed, act) && !slices.Contains(acts, act) {
				acts = append(acts, act)
			}
		}
		// Docker's token spec: grant the intersection; the registry refuses what is missing.
		if len(acts) > 0 {
			granted = append(granted, Access{Type: a.Type, Name: a.Name, Actions: acts})
		}
	}
	tok, err := i.keys.sign(user, granted, now)
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error", "signing failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"token": tok, "access_token": tok, "expires_in": int(TokenTTL.Seconds()),
		"issued_at": now.UTC().Format(time.RFC3339),
	})
}

// parseScope reads "type:name:actions" (name may hold a port-less path; actions comma-separated).
func parseScope(s string) (Access, bool) {
	typ, rest, ok := strings.Cut(s, ":")
	i := strings.LastIndex(rest, ":")
	if !ok || i <= 0 || typ == "" || len(s) > 512 {
		return Access{}, false
	}
	name, acts := rest[:i], strings.Split(rest[i+1:], ",")
	return Access{Type: typ, Name: name, Actions: acts}, true
}

// sign makes a token for user with access, valid from now for TokenTTL.
func (k *Keys) sign(user string, access []Access, now time.Time) (string, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: Issuer, Subject: user, Audience: jwt.ClaimStrings{Service},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Second)),
			ExpiresAt: jwt.NewNumericDate(now.Add(TokenTTL)), ID: hex.EncodeToString(jti),
		},
		Access: access,
	})
	t.Header["kid"] = k.kid
	return t.SignedString(k.signing)
}

func tokenError(w http.ResponseWriter, code int, errCode, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": errCode, "error_description": msg})
}
