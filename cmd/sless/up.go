package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/autoscale"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/local"
	"github.com/sless-dev/sless/local/runtimeimages"
)

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "sless")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "sless")
}

func defaultCacheDir() string {
	if d := os.Getenv("SLESS_CACHE"); d != "" {
		return d
	}
	d, _ := os.UserCacheDir()
	return filepath.Join(d, "sless")
}

// upConfig is what `sless up`'s flags say.
type upConfig struct {
	dataDir, listen, regListen, publicURL, podmanRoot, basesDir, basesScript string
	fnDomain                                                                 string
	uploadRate                                                               float64
	uploadBurst, maxHeld                                                     int
	jwksURL, pubKey, issuer, audience                                        string
	anyAudience                                                              bool
	uploadLimit                                                              int64
	pipIndex, npmRegistry, depsCA                                            string
	testClock, quiet                                                         bool
	subnet                                                                   netip.Prefix
	indexHosts                                                               []string
	quota                                                                    local.Quota
	stableWindow, panicWindow                                                time.Duration
}

// Per-tenant caps of sless up by default: the operator's (--tenant-quota-functions 100,
// --tenant-quota-memory 8Gi), and 5 job and cron runs at once.
const (
	defaultQuotaFunctions = 100
	defaultQuotaMemory    = "8Gi"
	defaultQuotaRuns      = 5
)

// fnDomainUsage is the same on both binaries.
const fnDomainUsage = "also serve each function at its own origin https://<name>--<namespace>.<domain>/ (point a wildcard DNS record and certificate at the API; no host below it serves the API). Use a domain of its own, ideally on the Public Suffix List"

func parseUpFlags(args []string, stderr io.Writer) (*upConfig, error) {
	c := &upConfig{}
	fs := flag.NewFlagSet("sless up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(), "where state, the registry and uploaded code live")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "API and /fn/ address")
	fs.StringVar(&c.regListen, "registry-listen", "127.0.0.1:5000", "embedded registry address")
	fs.StringVar(&c.publicURL, "public-url", "", "base URL users reach the API at (default http://<listen>)")
	fs.StringVar(&c.fnDomain, "fn-domain", "", fnDomainUsage)
	fs.Float64Var(&c.uploadRate, "upload-rate", api.DefaultUploadsPerMinute, "code uploads a namespace may make per minute on average (429 throttled beyond; 0 for no limit)")
	fs.IntVar(&c.maxHeld, "max-held", api.DefaultMaxHeld, "requests of one function /fn/ holds while every instance is busy or none is ready yet (429 throttled beyond)")
	fs.IntVar(&c.uploadBurst, "upload-burst", api.DefaultUploadBurst, "code uploads a namespace may make at once above --upload-rate")
	fs.DurationVar(&c.stableWindow, "autoscale-stable-window", autoscale.DefaultStableWindow, "the load is averaged over this window to decide each function's instances")
	fs.DurationVar(&c.panicWindow, "autoscale-panic-window", autoscale.DefaultPanicWindow, "a load of twice the capacity over this window scales up at once")
	fs.StringVar(&c.podmanRoot, "podman-root", filepath.Join(defaultCacheDir(), "podman"), "podman storage (shared, so base layers are pulled once)")
	fs.StringVar(&c.basesDir, "bases-dir", filepath.Join(defaultCacheDir(), "bases"), "language base image layouts (hack/build-bases.sh)")
	fs.StringVar(&c.basesScript, "bases-script", "hack/build-bases.sh", "script that builds missing bases ('' to never build)")
	fs.StringVar(&c.jwksURL, "jwks-url", "", "verify tokens with keys from this JWKS URL instead of the dev secret")
	fs.StringVar(&c.pubKey, "jwt-public-key", "", "verify tokens with this PEM public key instead of the dev secret")
	fs.StringVar(&c.issuer, "jwt-issuer", "", "required iss claim")
	fs.StringVar(&c.audience, "jwt-audience", "", "required aud claim (required with --jwks-url unless --allow-any-audience)")
	fs.BoolVar(&c.anyAudience, "allow-any-audience", false, "with --jwks-url and no --jwt-audience, accept tokens the identity provider issued to any application")
	fs.Int64Var(&c.uploadLimit, "upload-limit", api.DefaultUploadLimit, "largest accepted code archive in bytes")
	fs.StringVar(&c.pipIndex, "pip-index-url", "", "package index for pip installs of requirements.txt (default: pip's)")
	fs.StringVar(&c.npmRegistry, "npm-registry", "", "registry for npm installs of package.json (default: npm's)")
	fs.StringVar(&c.depsCA, "deps-ca-file", defaultCAFile(), "CA bundle for dependency installs ('' for the runtime image's own)")
	fs.Func("subnet", "the instance's IPv4 /24 for its own container networks (default: a free one in 10.89.0.0/16; never podman's 10.88.0.0/16)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		c.subnet = p
		return err
	})
	fs.Func("index-host", "a host (host[:port]) dependency installs may reach through the index proxy besides the indexes' own (repeatable, e.g. files.pythonhosted.org)", func(v string) error {
		c.indexHosts = append(c.indexHosts, v)
		return nil
	})
	fs.IntVar(&c.quota.Functions, "tenant-quota-functions", defaultQuotaFunctions, "functions a namespace may hold; a create beyond is 403 quota_exceeded (0: no cap)")
	c.quota.MemoryMB = mebibytes(resource.MustParse(defaultQuotaMemory))
	fs.Func("tenant-quota-memory", "memory limits a namespace's running function, job and cron containers may have in all, e.g. 8Gi or 512Mi (default "+defaultQuotaMemory+"; 0: no cap)", func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return fmt.Errorf("want a quantity such as 8Gi or 512Mi, not %q", v)
		}
		c.quota.MemoryMB = mebibytes(q)
		return nil
	})
	fs.IntVar(&c.quota.Runs, "tenant-quota-runs", defaultQuotaRuns, "job and cron runs a namespace may have going at once; one beyond waits (0: no cap)")
	fs.BoolVar(&c.testClock, "test-clock", false, "cron follows a manual clock set with POST /debug/clock?time=RFC3339 (tests only)")
	fs.BoolVar(&c.quiet, "quiet", false, "no request log on stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if c.quota.Functions < 0 || c.quota.Runs < 0 {
		return nil, usageError{"--tenant-quota-functions and --tenant-quota-runs cannot be negative"}
	}
	if c.jwksURL != "" && c.pubKey != "" {
		return nil, usageError{"give at most one of --jwks-url and --jwt-public-key"}
	}
	if _, err := os.Stat(c.basesScript); err != nil {
		c.basesScript = ""
	}
	return c, nil
}

// mebibytes is q in MiB, rounded up: a small positive value must not become 0, "no cap".
func mebibytes(q resource.Quantity) int {
	return int((q.Value() + 1<<20 - 1) >> 20)
}

// runUp is `sless up`: the whole platform on one host.
func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseUpFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		if _, ok := err.(usageError); ok {
			return err
		}
		return usageError{err.Error()}
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return err
	}
	logOut := stderr
	if c.quiet {
		logOut = io.Discard
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))
	verifier, tokenFile, err := c.verifier(ctx, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.listen, err)
	}
	defer ln.Close()
	if c.publicURL == "" {
		c.publicURL = "http://" + ln.Addr().String()
	}
	var clock local.Clock
	var manual *local.ManualClock
	if c.testClock {
		manual = local.NewManualClock(time.Now())
		clock = manual
	}
	builds := build.NewMetrics() // counted on the API's /metrics
	p, err := local.Open(ctx, local.Config{DataDir: c.dataDir, RegistryListen: c.regListen, PodmanRoot: c.podmanRoot,
		BasesDir: c.basesDir, Clock: clock, Logger: logger, Progress: stderr,
		PipIndexURL: c.pipIndex, NPMRegistry: c.npmRegistry, DepsCAFile: c.depsCA, Subnet: c.subnet, IndexHosts: c.indexHosts, Quota: c.quota,
		Autoscale:    []autoscale.Option{autoscale.WithStableWindow(c.stableWindow), autoscale.WithPanicWindow(c.panicWindow)},
		ObserveBuild: builds.Observe})
	if err != nil {
		return err
	}
	defer p.Close()
	srv, err := api.New(p.Backend(), api.WithVerifier(verifier), api.WithLogger(logger), api.WithPublicURL(c.publicURL),
		api.WithFunctionDomain(c.fnDomain), api.WithUploadLimit(c.uploadLimit), api.WithUploadRate(c.uploadRate, c.uploadBurst), api.WithMaxHeld(c.maxHeld), api.WithTempDir(c.dataDir), api.WithReadiness(p.Ready))
	if err != nil {
		return err
	}
	srv.Metrics().MustRegister(builds)
	p.UseLoads(srv.Activator().Loads)
	var handler http.Handler = srv.Handler()
	if manual != nil {
		handler = clockHandler(manual, p, handler)
	}
	fmt.Fprintf(stdout, "sless up: API and /fn/ on %s, registry on %s, data in %s\n", c.publicURL, p.RegistryAddr(), c.dataDir)
	fmt.Fprintf(stdout, "sless up: the registry needs credentials; for crane: export DOCKER_CONFIG=%s\n", p.RegistryConfigDir())
	if tokenFile != "" {
		fmt.Fprintf(stdout, "sless up: dev mode: a token for user \"dev\" is in %s\n", tokenFile)
		fmt.Fprintf(stdout, "  export SLESS_ENDPOINT=%s SLESS_API_TOKEN=$(cat %s)\n", c.publicURL, tokenFile)
	}
	err = serveUp(ctx, p, api.NewHTTPServer("", handler, logger), ln, func(ctx context.Context) error {
		// Missing language bases are built first (minutes, once); /readyz says so meanwhile.
		return buildBases(ctx, p, c.basesDir, c.basesScript, stderr)
	})
	fmt.Fprintln(stdout, "sless up: stopped; function containers keep running and are adopted on the next start")
	return err
}

// verifier checks tokens with the configured keys, or with the dev secret kept in the data dir
// (then tokenFile names the dev token written beside it).
func (c *upConfig) verifier(ctx context.Context, logger *slog.Logger) (v *auth.Verifier, tokenFile string, err error) {
	// Empty issuer and audience check nothing.
	opts := []auth.Option{auth.WithLogger(logger), auth.WithContext(ctx), auth.WithIssuer(c.issuer), auth.WithAudience(c.audience),
		auth.WithAnyAudience(c.anyAudience)}
	switch {
	case c.jwksURL != "":
		opts = append(opts, auth.WithJWKS(c.jwksURL))
	case c.pubKey != "":
		pem, err := os.ReadFile(c.pubKey)
		if err != nil {
			return nil, "", fmt.Errorf("--jwt-public-key: %w", err)
		}
		opts = append(opts, auth.WithPublicKeyPEM(pem))
	default:
		secret, tf, err := devAuth(c.dataDir)
		if err != nil {
			return nil, "", err
		}
		tokenFile = tf
		opts = append(opts, auth.WithHS256Secret(secret))
	}
	v, err = auth.New(opts...)
	return v, tokenFile, err
}

// serveUp serves the API on ln while the platform runs (after prepare), until ctx ends or either
// stops; both are stopped together.
func serveUp(ctx context.Context, p *local.Platform, hs *http.Server, ln net.Listener, prepare func(context.Context) error) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() {
		if err := prepare(runCtx); err != nil {
			p.NotReady(err.Error())
			runErr <- err
			return
		}
		runErr <- p.Run(runCtx)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- api.Serve(runCtx, hs, ln, 10*time.Second) }()
	select {
	case err := <-runErr:
		cancel()
		<-serveErr
		return err
	case err := <-serveErr:
		cancel()
		<-runErr
		return err
	case <-ctx.Done():
		cancel()
		return errors.Join(<-serveErr, <-runErr)
	}
}

// buildBases runs script for every runtime whose base layout is missing from basesDir.
func buildBases(ctx context.Context, p *local.Platform, basesDir, script string, progress io.Writer) error {
	for _, rt := range runtimeimages.Missing(basesDir) {
		if script == "" {
			return fmt.Errorf("the %s base image is missing from %s; build it with hack/build-bases.sh %s", rt, basesDir, rt)
		}
		p.NotReady("building the " + rt + " base image (first start only; a few minutes)")
		fmt.Fprintf(progress, "sless up: building the %s base image from Debian packages (first start only, a few minutes)…\n", rt)
		cmd := exec.CommandContext(ctx, "bash", script, rt)
		cmd.Stdout, cmd.Stderr = io.Discard, progress
		cmd.Env = append(os.Environ(), "SLESS_CACHE="+filepath.Dir(basesDir))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building the %s base with %s: %w", rt, script, err)
		}
	}
	return nil
}

// devAuth keeps an HS256 secret in the data dir (made on first start) and writes a ready-to-use
// token for the user "dev" beside it.
func devAuth(dataDir string) ([]byte, string, error) {
	secretFile := filepath.Join(dataDir, "dev-secret")
	b, err := os.ReadFile(secretFile)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		rand.Read(raw)
		b = []byte(hex.EncodeToString(raw))
		if err := os.WriteFile(secretFile, b, 0o600); err != nil {
			return nil, "", err
		}
	} else if err != nil {
		return nil, "", err
	}
	secret := []byte(strings.TrimSpace(string(b)))
	token, err := auth.IssueHS256(secret, "dev", 365*24*time.Hour)
	if err != nil {
		return nil, "", err
	}
	tokenFile := filepath.Join(dataDir, "dev-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	return secret, tokenFile, nil
}

// clockHandler serves POST /debug/clock?time=RFC3339 (only with --test-clock): it sets the cron
// clock and runs a scheduling pass before answering.
func clockHandler(c *local.ManualClock, p *local.Platform, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/clock" {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost {
			t, err := time.Parse(time.RFC3339, r.URL.Query().Get("time"))
			if err != nil {
				http.Error(w, "time must be RFC 3339", http.StatusBadRequest)
				return
			}
			c.Set(t)
			if err := p.Poke(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, c.Now().UTC().Format(time.RFC3339))
	})
}

// defaultCAFile is the host's CA bundle: installs then trust what the host trusts (a TLS proxy in
// front of the package registries, a private index).
func defaultCAFile() string {
	const debian = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	return ""
}

// runDown is `sless down`: removes an instance's containers, networks and firewall chain (what
// outlives `sless up` by design); its data stays.
func runDown(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sless down", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "the instance's data dir (as given to sless up)")
	podmanRoot := fs.String("podman-root", filepath.Join(defaultCacheDir(), "podman"), "podman storage (as given to sless up)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	return local.Down(ctx, *dataDir, *podmanRoot)
}
