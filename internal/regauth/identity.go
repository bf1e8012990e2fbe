package regauth

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// User names. Basic authentication splits at the first colon, so none contains one.
const (
	// PlatformUser is sless itself: it pushes function images and dependency layers, deletes,
	// and reads the catalog.
	PlatformUser = "sless"
	// NodeUser is a node's container runtime: it pulls system images (systemImage), never a
	// tenant's.
	NodeUser = "node"
	// DepsRepoPrefix is where dependency layers live, one repository per key.
	DepsRepoPrefix = "sless/deps/"

	tenantPrefix = "pull."
	depsPrefix   = "deps."
	// MaxDepsTTL bounds how long a deps push credential may be valid.
	MaxDepsTTL = 24 * time.Hour
)

// Credential is a user name and password for the registry.
type Credential struct {
	Username, Password string
}

// Authenticator is the credential for go-containerregistry.
func (c Credential) Authenticator() authn.Authenticator {
	return &authn.Basic{Username: c.Username, Password: c.Password}
}

// DockerConfigJSON is a docker config.json (also a .dockerconfigjson Secret's content and podman's
// --authfile) holding c for registry (host[:port]).
func (c Credential) DockerConfigJSON(registry string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{registry: map[string]string{
		"username": c.Username, "password": c.Password,
		"auth": base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password)),
	}}})
	return b
}

// Keychain resolves c for registry (host[:port]) and anonymous elsewhere.
func (c Credential) Keychain(registry string) authn.Keychain {
	return keychain{registry: registry, auth: c.Authenticator()}
}

type keychain struct {
	registry string
	auth     authn.Authenticator
}

func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if r.RegistryStr() == k.registry {
		return k.auth, nil
	}
	return authn.Anonymous, nil
}

// Platform is sless's own credential: every action on every repository.
func (k *Keys) Platform() Credential { return k.credential(PlatformUser) }

// Node is a node's pull credential for system images.
func (k *Keys) Node() Credential { return k.credential(NodeUser) }

// TenantPull is namespace ns's credential: pull, on its own repositories (<ns>/…) and system
// images only.
func (k *Keys) TenantPull(ns string) Credential { return k.credential(tenantPrefix + ns) }

// DepsPush is the credential for pushing one dependency layer (repository DepsRepo(key)) until
// the given time (at most MaxDepsTTL from now).
func (k *Keys) DepsPush(key string, until time.Time) Credential {
	return k.credential(depsPrefix + key + "." + strconv.FormatInt(until.Unix(), 10))
}

// DepsRepo is the repository (below the registry host) of dependency layer key.
func DepsRepo(key string) string { return DepsRepoPrefix + key }

func (k *Keys) credential(user string) Credential {
	return Credential{Username: user, Password: k.password(user)}
}

var (
	namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	depsKeyPattern   = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// policy says which actions user may have on a resource; nil means the user name is unknown.
type policy func(typ, name string, now time.Time) []string

var (
	everything = []string{"pull", "push", "delete", "*"}
	pullOnly   = []string{"pull"}
)

// policyFor maps a user name to what it may do.
func policyFor(user string) policy {
	switch {
	case user == PlatformUser:
		return func(typ, name string, _ time.Time) []string {
			if typ == "registry" && name == "catalog" {
				return []string{"*"}
			}
			if typ == "repository" {
				return everything
			}
			return nil
		}
	case user == NodeUser:
		return func(typ, name string, _ time.Time) []string {
			if typ == "repository" && systemImage(name) {
				return pullOnly
			}
			return nil
		}
	case strings.HasPrefix(user, tenantPrefix):
		ns := strings.TrimPrefix(user, tenantPrefix)
		if !namespacePattern.MatchString(ns) || len(ns) > 63 || ns == "sless" {
			return nil
		}
		// System images too: a deps Job's pod runs the runtime image (the installer) and the
		// operator's (the push step) with the namespace's pull secret.
		return func(typ, name string, _ time.Time) []string {
			if typ == "repository" && (strings.HasPrefix(name, ns+"/") || systemImage(name)) {
				return pullOnly
			}
			return nil
		}
	case strings.HasPrefix(user, depsPrefix):
		key, exp, ok := strings.Cut(strings.TrimPrefix(user, depsPrefix), ".")
		until, err := strconv.ParseInt(exp, 10, 64)
		if !ok || err != nil || !depsKeyPattern.MatchString(key) {
			return nil
		}
		return func(typ, name string, now time.Time) []string {
			if now.Unix() > until || time.Unix(until, 0).Sub(now) > MaxDepsTTL {
				return nil
			}
			if typ == "repository" && name == DepsRepo(key) {
				return []string{"pull", "push"}
			}
			return nil
		}
	}
	return nil
}

// systemImage reports whether repository name holds a platform image anyone may pull: sless/…
// (runtimes, bases, the operator) but not a dependency layer, or a one-component name (pause,
// coredns). A tenant's repositories always have two components, <namespace>/<function>.
func systemImage(name string) bool {
	if strings.HasPrefix(name, DepsRepoPrefix) {
		return false
	}
	return strings.HasPrefix(name, "sless/") || !strings.Contains(name, "/")
}

// String is for logs: never the password.
func (c Credential) String() string { return fmt.Sprintf("registry user %q", c.Username) }
