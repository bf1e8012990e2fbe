package apiv1

import (
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Secrets: named sets of values in a namespace, written whole and never read back. A function
// takes values from them as environment variables (Function.SecretEnv) or as files
// (Function.SecretFiles); the API answers a secret's names, keys and version only.
const (
	// MaxSecretValueBytes bounds one value, MaxSecretBytes the keys and values of one secret
	// together (Kubernetes' own bound on a Secret), MaxSecrets the secrets of a namespace.
	MaxSecretValueBytes = 64 << 10
	MaxSecretBytes      = 1 << 20
	MaxSecrets          = 100
	// MaxSecretKeys and MaxSecretKeyBytes (the key names of one secret together) keep what the
	// platform records of each secret beside the namespace small (on Kubernetes, an annotation).
	MaxSecretKeys     = 64
	MaxSecretKeyBytes = 1 << 10
	// MaxSecretFiles bounds a function's secret_files.
	MaxSecretFiles = 16
	// SecretFilesRoot is the directory secret_files mount under.
	SecretFilesRoot = "/var/run/secrets/"
	// PrivateEnvPrefix is the platform's: no env var of a user's starts with it.
	PrivateEnvPrefix = "SLESS_"
)

// SecretPut is the body of PUT /v1/namespaces/{ns}/secrets/{name}: the whole secret, each key an
// environment variable name.
type SecretPut struct {
	Data map[string]string `json:"data"`
}

// Secret is what the API tells of a stored secret: never a value. Version counts its writes (1 for
// the first), so that a change shows without telling anything of what changed.
type Secret struct {
	Name      string     `json:"name"`
	Keys      []string   `json:"keys"`
	Version   int64      `json:"version"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// ValidSecretData checks a secret's data against the limits above; the error names the key at
// fault, never a value.
func ValidSecretData(data map[string]string) error {
	if len(data) == 0 {
		return invalid("a secret needs at least one key in data")
	}
	if len(data) > MaxSecretKeys {
		return invalid("%d keys in data; at most %d", len(data), MaxSecretKeys)
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	size, keyBytes := 0, 0
	for _, k := range keys {
		if !envNameRE.MatchString(k) {
			return invalid("secret key %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		v := data[k]
		switch {
		case len(v) > MaxSecretValueBytes:
			return invalid("the value of key %q is %d bytes; at most %d", k, len(v), MaxSecretValueBytes)
		case strings.IndexByte(v, 0) >= 0:
			return invalid("the value of key %q contains a NUL byte", k)
		case !utf8.ValidString(v):
			return invalid("the value of key %q is not valid UTF-8", k)
		}
		keyBytes += len(k)
		size += len(k) + len(v)
	}
	if keyBytes > MaxSecretKeyBytes {
		return invalid("the key names together are %d bytes; at most %d", keyBytes, MaxSecretKeyBytes)
	}
	if size > MaxSecretBytes {
		return invalid("the keys and values together are %d bytes; at most %d", size, MaxSecretBytes)
	}
	return nil
}

// SplitSecretRef reads a secret_env value "secret/key".
func SplitSecretRef(ref string) (secret, key string, err error) {
	secret, key, ok := strings.Cut(ref, "/")
	if !ok || ValidName("secret", secret) != nil || !envNameRE.MatchString(key) {
		return "", "", invalid("secret reference %q must be SECRET/KEY: a secret's name, '/', and one of its keys (letters, digits and '_')", ref)
	}
	return secret, key, nil
}

// ValidSecretEnvName checks the name of a secret_env variable: an env var name that is neither
// the platform's nor the runtime's.
func ValidSecretEnvName(name string, reserved func(string) bool) error {
	if !envNameRE.MatchString(name) {
		return invalid("secret_env name %q is invalid: use letters, digits and '_', not starting with a digit", name)
	}
	if reserved(name) || strings.HasPrefix(name, PrivateEnvPrefix) {
		return invalid("secret_env name %q is set by the platform and cannot be overridden", name)
	}
	return nil
}

// ValidSecretFilesPath checks a secret_files path: a directory under /var/run/secrets/ of one or
// more segments of letters, digits, '.', '_' and '-' (not "." or ".."), outside Kubernetes' own
// (kubernetes.io, where a service account token would go).
func ValidSecretFilesPath(p string) error {
	rest, ok := strings.CutPrefix(p, SecretFilesRoot)
	bad := !ok || rest == "" || len(p) > 256 || strings.HasSuffix(rest, "/")
	for _, seg := range strings.Split(rest, "/") {
		if bad {
			break
		}
		bad = seg == "" || seg == "." || seg == ".." || strings.Trim(seg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != ""
	}
	if bad {
		return invalid("secret_files path %q must be a directory under %s (segments of letters, digits, '.', '_' and '-'; at most 256 characters)", p, SecretFilesRoot)
	}
	if first, _, _ := strings.Cut(rest, "/"); first == "kubernetes.io" || strings.HasSuffix(first, ".kubernetes.io") {
		return invalid("secret_files path %q is Kubernetes' own (service account tokens); choose another directory", p)
	}
	return nil
}
