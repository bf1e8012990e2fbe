package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
)

// RequireReal is true when missing real components must fail tests instead of skipping them.
func RequireReal() bool { return os.Getenv("SLESS_REQUIRE_REAL") == "1" }

// Missing skips the test with a loud message, or fails it under SLESS_REQUIRE_REAL=1.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("!!! SKIPPING: %s is not available (%v); run `make tools` or `make test` to install it", what, err)
	if RequireReal() {
		t.Fatal(msg + " — SLESS_REQUIRE_REAL=1 forbids skipping")
	}
	t.Skip(msg)
}

// Registry starts a real Distribution registry on 127.0.0.1 (a free port) for the test's lifetime
// and returns its host:port.
func Registry(t testing.TB) string {
	t.Helper()
	s, err := registry.Start(context.Background(), registry.Config{RootDir: t.TempDir()})
	if err != nil {
		t.Fatalf("starting registry: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr()
}

// AuthRegistry starts a real registry with token authentication (as sless runs it) and returns
// its host:port and the directory holding its keys (regauth.Load reads them).
func AuthRegistry(t testing.TB) (addr, keysDir string) {
	t.Helper()
	keysDir = filepath.Join(t.TempDir(), "registry-auth")
	keys, err := regauth.LoadOrCreate(keysDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := registry.Start(context.Background(), registry.Config{RootDir: t.TempDir(), Auth: keys})
	if err != nil {
		t.Fatalf("starting registry: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr(), keysDir
}

// StartRegistry is Registry for TestMain: the caller closes it.
func StartRegistry(root string) (*registry.Server, error) {
	return registry.Start(context.Background(), registry.Config{RootDir: root})
}

// Tool finds a binary built or installed by hack/: $SLESS_<NAME> (upper case), then PATH, then the
// newest $SLESS_CACHE/bin/<name>-* (the cache layout of hack/lib.sh).
func Tool(name string) (string, error) {
	if p := os.Getenv("SLESS_" + upper(name)); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob(filepath.Join(CacheDir(), "bin", name+"-*"))
	sort.Strings(matches)
	for i := len(matches) - 1; i >= 0; i-- {
		if st, err := os.Stat(matches[i]); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return matches[i], nil
		}
	}
	return "", fmt.Errorf("%s not on PATH, not in $SLESS_%s, not in %s", name, upper(name), filepath.Join(CacheDir(), "bin"))
}

// CacheDir is $SLESS_CACHE or ~/.cache/sless, where hack/ keeps what it builds.
func CacheDir() string {
	if d := os.Getenv("SLESS_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sless")
	}
	return filepath.Join(os.TempDir(), "sless-cache")
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c == '-' || c == '.':
			b[i] = '_'
		}
	}
	return string(b)
}
