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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/auth"
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

// runUp is `sless up`: the whole platform on one host.
func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sless up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", defaultDataDir(), "where state, the registry and uploaded code live")
	listen := fs.String("listen", "127.0.0.1:8080", "API and /fn/ address")
	regListen := fs.String("registry-listen", "127.0.0.1:5000", "embedded registry address")
	publicURL := fs.String("public-url", "", "base URL users reach the API at (default http://<listen>)")
	podmanRoot := fs.String("podman-root", filepath.Join(defaultCacheDir(), "podman"), "podman storage (shared, so base layers are pulled once)")
	basesDir := fs.String("bases-dir", filepath.Join(defaultCacheDir(), "bases"), "language base image layouts (hack/build-bases.sh)")
	basesScript := fs.String("bases-script", "hack/build-bases.sh", "script that builds missing bases ('' to never build)")
	jwksURL := fs.String("jwks-url", "", "verify tokens with keys from this JWKS URL instead of the dev secret")
	pubKey := fs.String("jwt-public-key", "", "verify tokens with this PEM public key instead of the dev secret")
	issuer := fs.String("jwt-issuer", "", "required iss claim")
	audience := fs.String("jwt-audience", "", "required aud claim")
	uploadLimit := fs.Int64("upload-limit", api.DefaultUploadLimit, "largest accepted code archive in bytes")
	pipIndex := fs.String("pip-index-url", "", "package index for pip installs of requirements.txt (default: pip's)")
	npmRegistry := fs.String("npm-registry", "", "registry for npm installs of package.json (default: npm's)")
	depsCA := fs.String("deps-ca-file", defaultCAFile(), "CA bundle for dependency installs ('' for the runtime image's own)")
	testClock := fs.Bool("test-clock", false, "cron follows a manual clock set with POST /debug/clock?time=RFC3339 (tests only)")
	quiet := fs.Bool("quiet", false, "no request log on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *jwksURL != "" && *pubKey != "" {
		return usageError{"give at most one of --jwks-url and --jwt-public-key"}
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	logOut := stderr
	if *quiet {
		logOut = io.Discard
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))

	aopts := []auth.Option{auth.WithLogger(logger), auth.WithContext(ctx)}
	if *issuer != "" {
		aopts = append(aopts, auth.WithIssuer(*issuer))
	}
	if *audience != "" {
		aopts = append(aopts, auth.WithAudience(*audience))
	}
	var tokenFile string
	switch {
	case *jwksURL != "":
		aopts = append(aopts, auth.WithJWKS(*jwksURL))
	case *pubKey != "":
		pem, err := os.ReadFile(*pubKey)
		if err != nil {
			return fmt.Errorf("--jwt-public-key: %w", err)
		}
		aopts = append(aopts, auth.WithPublicKeyPEM(pem))
	default:
		secret, tf, err := devAuth(*dataDir)
		if err != nil {
			return err
		}
		tokenFile = tf
		aopts = append(aopts, auth.WithHS256Secret(secret))
	}
	verifier, err := auth.New(aopts...)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	if *publicURL == "" {
		*publicURL = "http://" + ln.Addr().String()
	}
	var clock local.Clock
	var manual *local.ManualClock
	if *testClock {
		manual = local.NewManualClock(time.Now())
		clock = manual
	}
	if _, err := os.Stat(*basesScript); err != nil {
		*basesScript = ""
	}
	var srv *api.Server // builds are counted on its /metrics
	p, err := local.Open(ctx, local.Config{DataDir: *dataDir, RegistryListen: *regListen, PodmanRoot: *podmanRoot,
		BasesDir: *basesDir, Clock: clock, Logger: logger, Progress: stderr,
		PipIndexURL: *pipIndex, NPMRegistry: *npmRegistry, DepsCAFile: *depsCA,
		ObserveBuild: func(result string, d time.Duration) { srv.ObserveBuild(result, d) }})
	if err != nil {
		ln.Close()
		return err
	}
	defer p.Close()
	srv, err = api.New(p.Backend(), api.WithVerifier(verifier), api.WithLogger(logger), api.WithPublicURL(*publicURL),
		api.WithUploadLimit(*uploadLimit), api.WithTempDir(*dataDir), api.WithReadiness(p.Ready))
	if err != nil {
		ln.Close()
		return err
	}
	var handler http.Handler = srv.Handler()
	if manual != nil {
		handler = clockHandler(manual, p, handler)
	}

	fmt.Fprintf(stdout, "sless up: API and /fn/ on %s, registry on %s, data in %s\n", *publicURL, p.RegistryAddr(), *dataDir)
	if tokenFile != "" {
		fmt.Fprintf(stdout, "sless up: dev mode: a token for user \"dev\" is in %s\n", tokenFile)
		fmt.Fprintf(stdout, "  export SLESS_ENDPOINT=%s SLESS_API_TOKEN=$(cat %s)\n", *publicURL, tokenFile)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() {
		// Missing language bases are built first (minutes, once); /readyz says so meanwhile.
		if err := buildBases(runCtx, p, *basesDir, *basesScript, stderr); err != nil {
			p.NotReady(err.Error())
			runErr <- err
			return
		}
		runErr <- p.Run(runCtx)
	}()
	serveErr := make(chan error, 1)
	go func() { serveErr <- api.Serve(runCtx, api.NewHTTPServer("", handler, logger), ln, 10*time.Second) }()
	select {
	case err = <-runErr:
		cancel()
		<-serveErr
	case err = <-serveErr:
		cancel()
		<-runErr
	case <-ctx.Done():
		cancel()
		err = errors.Join(<-serveErr, <-runErr)
	}
	fmt.Fprintln(stdout, "sless up: stopped; function containers keep running and are adopted on the next start")
	return err
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
