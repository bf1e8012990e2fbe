package runspec

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SecretRefs is how a function uses its namespace's secrets: Env maps a variable to "secret/key",
// Files a directory under /var/run/secrets/ to a secret (one read-only file per key). Both
// backends resolve them by these rules when an instance, a job or a cron run starts.
type SecretRefs struct {
	Env   map[string]string
	Files map[string]string
}

// Names are the secrets refs use, sorted, each once.
func (r SecretRefs) Names() []string {
	var out []string
	for _, ref := range r.Env {
		if name, _, ok := strings.Cut(ref, "/"); ok {
			out = append(out, name)
		}
	}
	for _, name := range r.Files {
		out = append(out, name)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Versions is the part of a run configuration the secrets make: "name=version" of each secret
// used, sorted, joined by ','; a missing one has version 0. It changes when a value does (a new
// version) and tells nothing of the values: a new one restarts the function, without a build.
func (r SecretRefs) Versions(version func(name string) int64) string {
	var parts []string
	for _, n := range r.Names() {
		parts = append(parts, n+"="+strconv.FormatInt(version(n), 10))
	}
	return strings.Join(parts, ",")
}

// Missing says which secret or key refs use is not there, or "" when all are: what a start fails
// with (it names the variable, secret and key, never a value). keys returns a secret's keys and
// whether it exists.
func (r SecretRefs) Missing(keys func(name string) ([]string, bool)) string {
	for _, e := range slices.Sorted(mapKeys(r.Env)) {
		name, key, _ := strings.Cut(r.Env[e], "/")
		ks, ok := keys(name)
		if !ok {
			return fmt.Sprintf("secret_env %s: secret %q does not exist in this namespace", e, name)
		}
		if !slices.Contains(ks, key) {
			return fmt.Sprintf("secret_env %s: secret %q has no key %q", e, name, key)
		}
	}
	for _, p := range slices.Sorted(mapKeys(r.Files)) {
		if _, ok := keys(r.Files[p]); !ok {
			return fmt.Sprintf("secret_files %s: secret %q does not exist in this namespace", p, r.Files[p])
		}
	}
	return ""
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
