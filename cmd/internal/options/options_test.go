package options_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/cmd/internal/options"
)

type groups struct {
	api       options.API
	auth      options.Auth
	autoscale options.Autoscale
	indexes   options.Indexes
	metrics   options.Metrics
	quota     options.TenantQuota
}

func parse(t *testing.T, args ...string) (*groups, error) {
	t.Helper()
	var g groups
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	g.api.AddFlags(fs)
	g.auth.AddFlags(fs)
	g.autoscale.AddFlags(fs)
	g.indexes.AddFlags(fs)
	g.metrics.AddFlags(fs)
	g.quota.AddFlags(fs)
	return &g, fs.Parse(args)
}

// The groups' defaults are the libraries' own, and every flag has a help text.
func TestDefaults(t *testing.T) {
	g, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if g.api.UploadLimit != api.DefaultUploadLimit || g.api.UploadRate != api.DefaultUploadsPerMinute || g.api.UploadBurst != api.DefaultUploadBurst ||
		g.api.MaxHeld != api.DefaultMaxHeld || g.api.Listen != "" || g.api.PublicURL != "" || g.api.FunctionDomain != "" {
		t.Errorf("API defaults %+v", g.api)
	}
	if g.autoscale.StableWindow != autoscale.DefaultStableWindow || g.autoscale.PanicWindow != autoscale.DefaultPanicWindow {
		t.Errorf("autoscale defaults %+v", g.autoscale)
	}
	if g.quota.Functions != options.DefaultQuotaFunctions || g.quota.Memory.String() != options.DefaultQuotaMemory || g.quota.MemoryMiB() != 8192 {
		t.Errorf("quota defaults %+v (%d MiB)", g.quota, g.quota.MemoryMiB())
	}
	if g.api.Address(options.UpListen) != "127.0.0.1:8080" || g.api.Address(options.OperatorListen) != ":8080" {
		t.Error("Address does not fall back to the binary's default")
	}
	if g.metrics.Address(options.UpMetricsListen) != "127.0.0.1:9091" || g.metrics.Address(options.OperatorMetricsListen) != ":9091" {
		t.Error("the metrics Address does not fall back to the binary's default")
	}
	if tok, err := g.metrics.Token(); tok != "" || err != nil {
		t.Errorf("no --metrics-token-file: %q %v", tok, err)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var again groups
	again.api.AddFlags(fs)
	again.auth.AddFlags(fs)
	again.autoscale.AddFlags(fs)
	again.indexes.AddFlags(fs)
	again.metrics.AddFlags(fs)
	again.quota.AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if len(f.Usage) < 10 {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
}

func TestParse(t *testing.T) {
	g, err := parse(t, "--listen", ":1", "--public-url", "https://api.example", "--upload-limit", "10", "--upload-rate", "0", "--upload-burst", "3",
		"--max-held", "7", "--autoscale-stable-window", "30s", "--autoscale-panic-window", "3s", "--index-host", "a.example,b.example",
		"--index-host", "c.example:8080", "--tenant-quota-functions", "0", "--tenant-quota-memory", "1500k")
	if err != nil {
		t.Fatal(err)
	}
	if g.api.Address("x") != ":1" || g.api.UploadLimit != 10 || g.api.UploadRate != 0 || g.api.UploadBurst != 3 || g.api.MaxHeld != 7 {
		t.Errorf("API %+v", g.api)
	}
	if len(g.api.ServerOptions(api.WithLogger(nil))) != 7 {
		t.Error("ServerOptions lost an option")
	}
	if g.autoscale.StableWindow != 30*time.Second || g.autoscale.PanicWindow != 3*time.Second {
		t.Errorf("autoscale %+v", g.autoscale)
	}
	if _, err := autoscale.New(g.autoscale.DeciderOptions()...); err != nil {
		t.Errorf("decider: %v", err)
	}
	// --index-host is repeated, never split at commas.
	if strings.Join(g.indexes.Hosts, " ") != "a.example,b.example c.example:8080" {
		t.Errorf("index hosts %q", g.indexes.Hosts)
	}
	// A small positive quantity is rounded up to a MiB, never to 0 ("no cap").
	if g.quota.Functions != 0 || g.quota.MemoryMiB() != 2 {
		t.Errorf("quota %+v (%d MiB)", g.quota, g.quota.MemoryMiB())
	}
	if _, err := parse(t, "--tenant-quota-memory", "lots"); err == nil || !strings.Contains(err.Error(), "want a quantity such as 8Gi") {
		t.Errorf("a bad quantity: %v", err)
	}
}

// --block-runtime: repeatable or comma-separated (empty entries, as an empty ConfigMap value
// gives, dropped), checked against the catalog.
func TestBlockRuntime(t *testing.T) {
	g, err := parse(t, "--block-runtime", "nodejs20,", "--block-runtime", " provided")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.api.Validate(); err != nil || strings.Join(g.api.RuntimePolicy().Blocked, " ") != "nodejs20 provided" {
		t.Errorf("blocked %q: %v", g.api.RuntimePolicy().Blocked, err)
	}
	g, _ = parse(t, "--block-runtime", "nodejs20", "--block-runtime", "python2")
	if err := g.api.Validate(); err == nil || !strings.Contains(err.Error(), "--block-runtime") || !strings.Contains(err.Error(), `"python2"`) {
		t.Errorf("an unknown runtime: %v", err)
	}
}

// The indexes come from the environment when their flags are not given, never as the flags'
// defaults (a usage message would print them).
func TestIndexesFromTheEnvironment(t *testing.T) {
	t.Setenv(options.EnvPipIndexURL, "https://u:secret@pypi.example/simple")
	t.Setenv(options.EnvNPMRegistry, "https://u:secret@npm.example/")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var ix options.Indexes
	ix.AddFlags(fs)
	if strings.Contains(fs.FlagUsages(), "secret") {
		t.Errorf("the usage shows a credential:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse([]string{"--npm-registry", "https://npm.internal/"}); err != nil {
		t.Fatal(err)
	}
	ix.ReadEnvironment()
	if ix.PipIndexURL != "https://u:secret@pypi.example/simple" || ix.NPMRegistry != "https://npm.internal/" {
		t.Errorf("indexes %+v", ix)
	}
}

func TestAuth(t *testing.T) {
	g, err := parse(t, "--jwks-url", "http://127.0.0.1:1/jwks", "--jwt-public-key", "key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.auth.Validate(); err == nil || !strings.Contains(err.Error(), "at most one") {
		t.Errorf("two key sources: %v", err)
	}
	// Neither: the binary picks its key.
	g, _ = parse(t, "--jwt-issuer", "iss")
	if key, err := g.auth.Key(); key != nil || err != nil {
		t.Errorf("no key flags: %v %v", key, err)
	}
	// A JWKS needs an audience (the verifier says so).
	g, _ = parse(t, "--jwks-url", "http://127.0.0.1:1/jwks")
	key, err := g.auth.Key()
	if err != nil || key == nil {
		t.Fatal(key, err)
	}
	if _, err := g.auth.Verifier(context.Background(), nil, key); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("a JWKS without an audience: %v", err)
	}
	// A missing key file is named.
	g, _ = parse(t, "--jwt-public-key", filepath.Join(t.TempDir(), "nope.pem"))
	if _, err := g.auth.Key(); err == nil || !strings.Contains(err.Error(), "--jwt-public-key") {
		t.Errorf("a missing key file: %v", err)
	}
	// The claims the flags require are checked.
	secret := []byte("0123456789abcdef0123456789abcdef")
	g, _ = parse(t, "--jwt-issuer", "https://idp.example")
	v, err := g.auth.Verifier(context.Background(), nil, auth.WithHS256Secret(secret))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.IssueHS256(secret, "u", time.Hour) // no iss
	if _, err := v.Verify(tok); err == nil {
		t.Error("a token without the required issuer passed")
	}
}

// --metrics-token-file: the token is the file's one line (surrounding blank space dropped); a
// file that is missing, empty or holds what no Authorization header can carry as it is fails with
// a message naming the flag.
func TestMetricsToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g, err := parse(t, "--metrics-listen", "127.0.0.1:0", "--metrics-token-file", file("good", "  scrape-Token_0123456789~\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := g.metrics.Token(); tok != "scrape-Token_0123456789~" || err != nil {
		t.Errorf("token %q %v", tok, err)
	}
	ln, err := g.metrics.Listen("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	for name, tc := range map[string]struct{ path, want string }{
		"missing":     {filepath.Join(dir, "nope"), "no such file"},
		"empty":       {file("empty", ""), "is empty"},
		"blank":       {file("blank", " \n\t\n"), "is empty"},
		"two lines":   {file("lines", "one\ntwo\n"), "one line of visible ASCII"},
		"a space":     {file("space", "scrape token"), "one line of visible ASCII"},
		"a NUL":       {file("nul", "scrape\x00token"), "one line of visible ASCII"},
		"not ASCII":   {file("utf8", "scrapé"), "one line of visible ASCII"},
		"a directory": {dir, "--metrics-token-file"},
	} {
		g, _ := parse(t, "--metrics-token-file", tc.path)
		tok, err := g.metrics.Token()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--metrics-token-file") || tok != "" {
			t.Errorf("%s: %q %v, want an error saying %q", name, tok, err, tc.want)
		}
	}
	// A busy address is named with its flag.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	g, _ = parse(t, "--metrics-listen", busy.Addr().String())
	if _, err := g.metrics.Listen(options.UpMetricsListen); err == nil || !strings.Contains(err.Error(), "--metrics-listen "+busy.Addr().String()) {
		t.Errorf("a busy address: %v", err)
	}
}
