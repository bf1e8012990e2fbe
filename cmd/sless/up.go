package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/cmd/internal/options"
	"github.com/sless-dev/sless/local"
	"github.com/sless-dev/sless/local/network"
	"github.com/sless-dev/sless/runspec"
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

// upConfig is what `sless up`'s flags say: the groups both servers share (package options), then
// the single host's own.
type upConfig struct {
	api       options.API
	auth      options.Auth
	autoscale options.Autoscale
	indexes   options.Indexes
	metrics   options.Metrics
	quota     options.TenantQuota

	dataDir, regListen, podmanRoot, basesDir, basesScript string
	depsCA, subnetFlag                                    string
	secretsKey                                            string
	allowBrokers                                          []string
	subnet                                                netip.Prefix
	egressOpt                                             options.Egress
	egress                                                runspec.EgressInstall
	runs, connRate, connMax                               int
	guardEvery                                            time.Duration
	testClock, quiet                                      bool
}

// defaultQuotaRuns is sless up's cap on a namespace's job and cron runs at once.
const defaultQuotaRuns = 5

func (c *upConfig) addFlags(fs *pflag.FlagSet) {
	c.api.AddFlags(fs)
	c.auth.AddFlags(fs)
	c.autoscale.AddFlags(fs)
	c.indexes.AddFlags(fs)
	c.metrics.AddFlags(fs)
	c.quota.AddFlags(fs)
	c.egressOpt.AddFlags(fs)

	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(), "where state, the registry and uploaded code live")
	fs.StringVar(&c.regListen, "registry-listen", "127.0.0.1:5000", "embedded registry address")
	fs.StringVar(&c.podmanRoot, "podman-root", filepath.Join(defaultCacheDir(), "podman"), "podman storage (shared, so base layers are pulled once)")
	fs.StringVar(&c.basesDir, "bases-dir", filepath.Join(defaultCacheDir(), "bases"), "language base image layouts (hack/build-bases.sh)")
	fs.StringVar(&c.basesScript, "bases-script", ownBasesScript(), "absolute path of the script that builds missing bases (default: hack/build-bases.sh of the tree this binary was built from, never the working directory's; '' to never build)")
	fs.StringVar(&c.secretsKey, "secrets-key-file", "", "the key namespaces' secrets are encrypted with at rest (made on first use, mode 0600; default: secrets.key in --data-dir)")
	fs.StringVar(&c.depsCA, "deps-ca-file", defaultCAFile(), "CA bundle for dependency installs ('' for the runtime image's own)")
	fs.StringVar(&c.subnetFlag, "subnet", "", "the instance's IPv4 /24 for its own container networks (default: a free one in 10.89.0.0/16; never podman's 10.88.0.0/16)")
	fs.IntVar(&c.connRate, "egress-conn-rate", network.DefaultConnRate, "new connections per second one tenant container may open (burst twice that)")
	fs.IntVar(&c.connMax, "egress-conn-max", network.DefaultConnMax, "connections one tenant container may have tracked at once")
	fs.DurationVar(&c.guardEvery, "confinement-check-interval", 2*time.Second, "how often the network confinement (chains, jumps, br_netfilter, IPv6 off on the bridges) is checked and restored; a container start also checks it first")
	fs.IntVar(&c.runs, "tenant-quota-runs", defaultQuotaRuns, "job and cron runs a namespace may have going at once; one beyond waits (0: no cap)")
	fs.StringArrayVar(&c.allowBrokers, "allow-broker", nil, "HOST:PORT of a message broker rabbitmq triggers may connect to although it is this host's or outside their namespace's egress, e.g. a broker on this host (repeatable)")
	fs.BoolVar(&c.testClock, "test-clock", false, "cron follows a manual clock set with POST /debug/clock?time=RFC3339 (tests only)")
	fs.BoolVar(&c.quiet, "quiet", false, "no request log on stderr")
}

// complete reads what the environment gives and checks the flags together; its errors are the
// command line's.
func (c *upConfig) complete() error {
	c.indexes.ReadEnvironment()
	if c.quota.Functions < 0 || c.runs < 0 {
		return usageError{"--tenant-quota-functions and --tenant-quota-runs cannot be negative"}
	}
	if c.quota.Memory.Sign() < 0 {
		return usageError{"--tenant-quota-memory cannot be negative"}
	}
	if c.subnetFlag != "" {
		p, err := netip.ParsePrefix(c.subnetFlag)
		if err != nil {
			return usageError{fmt.Sprintf("--subnet: %v", err)}
		}
		c.subnet = p
	}
	var err error
	if c.egress, err = c.egressOpt.Install(); err != nil {
		return usageError{"--" + err.Error()}
	}
	for _, allows := range append([][]apiv1.EgressAllow{c.egress.Allow}, slices.Collect(maps.Values(c.egress.Namespaces))...) {
		for _, a := range allows {
			if !a.Prefix.Addr().Is4() {
				return usageError{fmt.Sprintf("--egress-allow %s: only IPv4 ranges (containers have no IPv6)", a)}
			}
		}
	}
	for _, b := range c.allowBrokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || port == "" {
			return usageError{fmt.Sprintf("--allow-broker %q: want HOST:PORT", b)}
		}
	}
	if c.guardEvery <= 0 {
		return usageError{"--confinement-check-interval must be positive"}
	}
	if c.connRate <= 0 || c.connMax <= 0 {
		return usageError{"--egress-conn-rate and --egress-conn-max must be positive"}
	}
	if err := c.auth.Validate(); err != nil {
		return usageError{err.Error()}
	}
	if err := c.api.Validate(); err != nil {
		return usageError{err.Error()}
	}
	return checkBasesScript(c.basesScript)
}

// localQuota is the per-tenant caps of the single host.
func (c *upConfig) localQuota() local.Quota {
	return local.Quota{Functions: int(c.quota.Functions), MemoryMB: c.quota.MemoryMiB(), Runs: c.runs}
}

// upCmd is `sless up`; run gets the parsed and checked configuration.
func upCmd(run func(ctx context.Context, c *upConfig, stdout, stderr io.Writer) error) *cobra.Command {
	c := &upConfig{}
	cmd := &cobra.Command{
		Use:   "up [--data-dir DIR] [--listen 127.0.0.1:8080] [--registry-listen 127.0.0.1:5000]",
		Short: "Run the whole platform on this host (podman)",
		Long: `Up runs the whole platform in one process on this host: the REST API and /fn/, an embedded
registry, the code store on disk, the in-process builder and a podman runner. It keeps its state in
the data dir; function containers keep running when it stops and are adopted by the next start.
Prometheus scrapes /metrics on --metrics-listen, never on --listen: the series name every
tenant's namespace and functions.
Without --jwks-url or --jwt-public-key it writes a development secret and a token for the user
"dev" into the data dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.complete(); err != nil {
				return err
			}
			return run(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.addFlags(cmd.Flags())
	return cmd
}

// runUp is `sless up`: the whole platform on one host.
func runUp(ctx context.Context, c *upConfig, stdout, stderr io.Writer) error {
	// The scrape token and both listeners first: a bad token file or a busy port fails the start
	// before anything is written.
	metricsToken, err := c.metrics.Token()
	if err != nil {
		return err
	}
	addr := c.api.Address(options.UpListen)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", addr, err)
	}
	defer ln.Close()
	mln, err := c.metrics.Listen(options.UpMetricsListen)
	if err != nil {
		return err
	}
	defer mln.Close()
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
	c.api.PublicURL = cmp.Or(c.api.PublicURL, "http://"+ln.Addr().String())
	builds := build.NewMetrics() // counted on /metrics
	var clock local.Clock
	var manual *local.ManualClock
	if c.testClock {
		manual = local.NewManualClock(time.Now())
		clock = manual
	}
	p, err := local.Open(ctx, local.Config{DataDir: c.dataDir, RegistryListen: c.regListen, PodmanRoot: c.podmanRoot,
		BasesDir: c.basesDir, Clock: clock, Logger: logger, Progress: stderr,
		PipIndexURL: c.indexes.PipIndexURL, NPMRegistry: c.indexes.NPMRegistry, DepsCAFile: c.depsCA, Subnet: c.subnet, IndexHosts: c.indexes.Hosts,
		Egress: c.egress, ConnRate: c.connRate, ConnMax: c.connMax, GuardInterval: c.guardEvery,
		Quota: c.localQuota(), Autoscale: c.autoscale.DeciderOptions(), ObserveBuild: builds.Observe, SecretsKeyFile: c.secretsKey, AllowBrokers: c.allowBrokers})
	if err != nil {
		return err
	}
	defer p.Close()
	srv, err := api.New(p.Backend(), c.api.ServerOptions(api.WithVerifier(verifier), api.WithLogger(logger), api.WithTempDir(c.dataDir), api.WithReadiness(p.Ready),
		api.WithDeliveryMetrics(p.Deliveries()))...)
	if err != nil {
		return err
	}
	srv.Metrics().MustRegister(builds)
	srv.Metrics().MustRegister(p.Collectors()...)
	p.UseLoads(srv.Activator().Loads)
	p.UseEvents(srv.Events(), srv.FunctionEvents())
	var handler http.Handler = srv.Handler()
	if manual != nil {
		handler = clockHandler(manual, p, handler)
	}
	publicURL := c.api.PublicURL
	fmt.Fprintf(stdout, "sless up: API and /fn/ on %s, registry on %s, data in %s\n", publicURL, p.RegistryAddr(), c.dataDir)
	fmt.Fprintf(stdout, "sless up: metrics on http://%s/metrics (for Prometheus only: they name every tenant's functions)\n", mln.Addr())
	fmt.Fprintf(stdout, "sless up: the registry needs credentials; for crane: export DOCKER_CONFIG=%s\n", p.RegistryConfigDir())
	if tokenFile != "" {
		fmt.Fprintf(stdout, "sless up: dev mode: a token for user \"dev\" is in %s\n", tokenFile)
		fmt.Fprintf(stdout, "  export SLESS_ENDPOINT=%s SLESS_API_TOKEN=$(cat %s)\n", publicURL, tokenFile)
	}
	err = serveUp(ctx, p, func(ctx context.Context) error {
		// Missing language bases are built first (minutes, once); /readyz says so meanwhile.
		return buildBases(ctx, p.NotReady, c.basesDir, c.basesScript, stderr)
	}, srv.RunAsync, served{api.NewHTTPServer("", handler, logger), ln}, served{api.NewHTTPServer("", api.MetricsHandler(srv.Metrics(), metricsToken), logger), mln})
	fmt.Fprintln(stdout, "sless up: stopped; function containers keep running and are adopted on the next start")
	return err
}

// verifier checks tokens with the keys the flags name, or with the dev secret kept in the data
// dir (then tokenFile names the dev token written beside it).
func (c *upConfig) verifier(ctx context.Context, logger *slog.Logger) (v *auth.Verifier, tokenFile string, err error) {
	key, err := c.auth.Key()
	if err != nil {
		return nil, "", err
	}
	if key == nil {
		secret, tf, err := devAuth(c.dataDir)
		if err != nil {
			return nil, "", err
		}
		tokenFile, key = tf, auth.WithHS256Secret(secret)
	}
	v, err = c.auth.Verifier(ctx, logger, key)
	return v, tokenFile, err
}

// served is an HTTP server and the listener it serves on.
type served struct {
	hs *http.Server
	ln net.Listener
}

// serveUp serves the API and /metrics on their listeners while the platform runs (after
// prepare), until ctx ends or any of them stops; all are stopped together.
func serveUp(ctx context.Context, p *local.Platform, prepare, dispatch func(context.Context) error, servers ...served) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Asynchronous invocations are delivered while the platform runs; serveUp returns once the
	// attempts in flight are settled (one cut short is taken again at the next start).
	dispatched := make(chan struct{})
	defer func() { cancel(); <-dispatched }()
	go func() { defer close(dispatched); dispatch(runCtx) }()
	runErr := make(chan error, 1)
	go func() {
		if err := prepare(runCtx); err != nil {
			p.NotReady(err.Error())
			runErr <- err
			return
		}
		runErr <- p.Run(runCtx)
	}()
	serveErr := make(chan error, len(servers))
	for _, s := range servers {
		go func() { serveErr <- api.Serve(runCtx, s.hs, s.ln, 10*time.Second) }()
	}
	pending := len(servers)
	rest := func() error {
		var errs []error
		for ; pending > 0; pending-- {
			errs = append(errs, <-serveErr)
		}
		return errors.Join(errs...)
	}
	select {
	case err := <-runErr:
		cancel()
		rest()
		return err
	case err := <-serveErr:
		pending--
		cancel()
		rest()
		<-runErr
		return err
	case <-ctx.Done():
		cancel()
		return errors.Join(rest(), <-runErr)
	}
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

// downCmd is `sless down`: removes an instance's containers, networks and firewall chain (what
// outlives `sless up` by design); its data stays.
func downCmd() *cobra.Command {
	var dataDir, podmanRoot string
	cmd := &cobra.Command{
		Use:   "down [--data-dir DIR]",
		Short: "Remove an instance's containers, networks and firewall chain",
		Long: `Down removes what an instance of 'sless up' leaves running by design: its function containers,
its networks and its firewall chain. Its data dir stays.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return local.Down(cmd.Context(), dataDir, podmanRoot)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "the instance's data dir (as given to sless up)")
	cmd.Flags().StringVar(&podmanRoot, "podman-root", filepath.Join(defaultCacheDir(), "podman"), "podman storage (as given to sless up)")
	return cmd
}
