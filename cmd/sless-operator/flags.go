package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sless-dev/sless/cmd/internal/options"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/operator/kubestore"
	"github.com/sless-dev/sless/operator/resources"
)

// Roles of a process (--role).
const (
	roleAll        = "all"
	roleAPI        = "api"
	roleController = "controller"
	// roleConsumer is one tenant namespace's rabbitmq consumer, in that namespace (the
	// controller makes its Deployment): none of the other flags apply.
	roleConsumer = "consumer"
)

// config is what the flags say: the groups both servers share (package options), then the
// operator's own.
type config struct {
	api       options.API
	auth      options.Auth
	autoscale options.Autoscale
	indexes   options.Indexes
	metrics   options.Metrics
	quota     options.TenantQuota
	egressOpt options.Egress

	role                                    string
	leaderElect, autoscaleOn                bool
	drainTimeout, shutdownDelay, retention  time.Duration
	databaseURL                             string
	registry, registryAuthDir, pullSecret   string
	insecure                                bool
	codeDir, s3Endpoint, s3Bucket, s3Region string
	secretFile                              string
	operatorNS                              string
	builds, tenantBuilds, workers           int
	loadsListen, loadsService               string
	operatorImage, egress, indexProxy       string
	policyGate                              bool
	runtimes                                runtimeFlags
	// metricsToken is --metrics-token-file's token, read with the command line.
	metricsToken string
	// kubeQuota holds the caps only Kubernetes has (CPU, disk, pods, a container's CPU); the
	// shared ones are in quota.
	kubeQuota resources.TenantQuota
	// clusterCIDRs and egressDeny are --cluster-cidr and --egress-deny; tenantEgress is what they
	// and the shared egress flags say.
	clusterCIDRs, egressDeny []string
	tenantEgress             resources.TenantEgress
	// eventKey is --event-key-file's key (the API checks consumers' tokens with it, the
	// controller derives them); consumerAPIURL and consumerAPIPort are where consumers reach /fn/.
	eventKeyFile, consumerAPIURL string
	consumerAPIPort              int32
	eventKey                     []byte
	// The consumer role's own: its namespace, the API's URL, the mounted secrets and token.
	consumer consumerFlags
}

// consumerFlags are --role=consumer's.
type consumerFlags struct {
	namespace, apiURL, secretsDir, tokenFile string
}

// addFlags declares every flag of sless-operator on fs.
func (c *config) addFlags(fs *pflag.FlagSet) {
	c.api.AddFlags(fs)
	c.auth.AddFlags(fs)
	c.autoscale.AddFlags(fs)
	c.indexes.AddFlags(fs)
	c.metrics.AddFlags(fs)
	c.quota.AddFlags(fs)
	c.egressOpt.AddFlags(fs)

	fs.StringVar(&c.role, "role", roleAll, "what this process runs: "+roleAPI+" (the REST API and /fn/: stateless, as many replicas as you like), "+roleController+" (the reconcilers, the autoscaler and the index proxy, active on the leader of the Lease only; --listen then serves /healthz and /readyz only), "+roleAll+" (both in one process) or "+roleConsumer+" (one tenant namespace's rabbitmq triggers, in that namespace: the controller runs it, with --namespace, --api-url, --consumer-secrets-dir and --event-token-file)")
	fs.StringVar(&c.eventKeyFile, "event-key-file", "", "the install's event key (Secret sless-event-key, ≥ 32 random bytes): the API trusts X-Sless-Event-* headers from a namespace's rabbitmq consumer holding HMAC(key, namespace), and the controller gives each consumer that token; without it rabbitmq triggers do not run")
	fs.StringVar(&c.consumerAPIURL, "consumer-api-url", "", "the API's internal Service URL rabbitmq consumers send to /fn/ through (default http://sless-api.<operator-namespace>.svc)")
	fs.Int32Var(&c.consumerAPIPort, "consumer-api-port", 8080, "the port of the API's pods (label app.kubernetes.io/name=sless-api) behind --consumer-api-url, which consumers' NetworkPolicy lets them reach")
	fs.StringVar(&c.consumer.namespace, "namespace", "", "--role=consumer: the tenant namespace whose rabbitmq triggers it runs")
	fs.StringVar(&c.consumer.apiURL, "api-url", "", "--role=consumer: the API's internal URL (/fn/)")
	fs.StringVar(&c.consumer.secretsDir, "consumer-secrets-dir", "", "--role=consumer: the tenant secrets its triggers name, as DIR/<secret>/<key>")
	fs.StringVar(&c.consumer.tokenFile, "event-token-file", "", "--role=consumer: the namespace's event token")
	// The URL carries a password: from the environment (a Secret), never from argv.
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL (≥ 14) keeping the invocation history of /fn/, shared by every API replica (default: $DATABASE_URL; the schema is migrated at start); empty: each replica keeps the last 1,000 per function in memory")
	fs.DurationVar(&c.retention, "invocation-retention", 7*24*time.Hour, "invocation records older than this are deleted (with --database-url)")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay-duration", 0, "on SIGTERM, keep serving this long with /readyz failing before closing the listener (as kube-apiserver's flag): for load balancers that learn of a stopping replica only from its readiness (on Kubernetes the pod's preStop sleep does this)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 15*time.Minute, "on SIGTERM, how long the requests in flight (a function may run up to 15 min) may take to finish before the process exits; keep the pod's terminationGracePeriodSeconds above it")
	fs.StringVar(&c.registry, "registry", "", "registry host[:port] function images are pushed to (required)")
	fs.BoolVar(&c.insecure, "insecure-registry", false, "plain HTTP to the registry")
	fs.StringVar(&c.codeDir, "code-dir", "", "code store directory (or the S3 flags)")
	fs.StringVar(&c.s3Endpoint, "s3-endpoint", "", "S3 endpoint of the code store")
	fs.StringVar(&c.s3Bucket, "s3-bucket", "", "S3 bucket of the code store")
	fs.StringVar(&c.s3Region, "s3-region", "us-east-1", "S3 region")
	fs.StringVar(&c.secretFile, "hs256-secret-file", "", "verify HS256 tokens with the secret in this file (development; without --jwks-url and --jwt-public-key)")
	fs.StringVar(&c.operatorNS, "operator-namespace", kubestore.DefaultOperatorNamespace, "namespace the operator (and the /fn/ proxy) runs in")
	fs.StringVar(&c.registryAuthDir, "registry-auth-dir", "", "the keys of sless's registry (the sless-registry-auth Secret: "+regauth.SigningKeyFile+", "+regauth.SecretFile+"): the operator pushes as the platform, each tenant namespace gets a pull-only credential for its own repositories, each deps Job a push credential for its key (not with --role=api)")
	fs.StringVar(&c.pullSecret, "pull-secret-file", "", "with a registry of your own instead of --registry-auth-dir: .dockerconfigjson copied into every tenant namespace as sless-registry and given to deps Jobs' push step (it must pull function images and push <registry>/sless/deps/*); the operator pushes with DOCKER_CONFIG (not with --role=api)")
	fs.IntVar(&c.builds, "max-builds", 2, "concurrent in-process builds")
	fs.IntVar(&c.tenantBuilds, "max-builds-per-namespace", 1, "concurrent in-process builds of one namespace (a build that finds none free waits without holding a worker)")
	fs.IntVar(&c.workers, "max-concurrent-reconciles", 4, "Functions reconciled at once (builds beyond --max-builds wait without holding one)")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "run the controllers and the autoscaler only while holding the Lease "+leaseName+" in --operator-namespace, so that two operator pods (a rollout, a second replica) never reconcile or scale at once; the REST API and /fn/ serve on every pod")
	fs.BoolVar(&c.autoscaleOn, "autoscale", true, "scale each function between its min_replicas and max_replicas on its load through /fn/ (false: one instance per function)")
	fs.StringVar(&c.loadsListen, "loads-listen", ":9090", "serve this replica's /fn/ load to the autoscaler on this internal address (port \"loads\" of the --loads-service Service, which routes nothing public); empty: none")
	fs.StringVar(&c.loadsService, "loads-service", "sless-api-loads", "the Service in --operator-namespace whose EndpointSlices list the /fn/ replicas the autoscaler reads (port \"loads\"; it must carry the label app.kubernetes.io/managed-by=sless-operator)")
	fs.StringVar(&c.operatorImage, "operator-image", "", "this operator's image (by digest): deps Jobs run its 'sless deps push'; empty refuses functions with dependencies")
	fs.StringVar(&c.egress, "deps-egress", "", "comma-separated CIDR or CIDR:PORT deps Job pods may reach besides DNS and the index proxy (the registry, for their push step), for tenant NetworkPolicies")
	fs.StringSliceVar(&c.clusterCIDRs, "cluster-cidr", nil, "a range of the cluster's pods, Services or nodes, in every address family it has (repeatable or comma-separated; find them with kubectl cluster-info dump | grep -m1 service-cluster-ip-range, the nodes' spec.podCIDRs and InternalIP addresses): tenant code never reaches them; without any, --egress-default=internet is not enforced and tenant code reaches only the cluster DNS and --egress-allow's destinations")
	fs.StringSliceVar(&c.egressDeny, "egress-deny", nil, "a further range of the platform outside --cluster-cidr that tenant code must never reach (S3, PostgreSQL, a load balancer in front of the API or the registry); repeatable or comma-separated")
	fs.BoolVar(&c.policyGate, "wait-for-network-policy", false, "start every pod of tenant code with --operator-image's 'sless policy-wait', so none of its code runs before its NetworkPolicy is in force (needs an enforcing NetworkPolicy implementation)")
	fs.StringVar(&c.indexProxy, "index-proxy-listen", "", "serve the index proxy deps Jobs' installers go through (e.g. :3128, behind the sless-index-proxy Service); empty: installers reach the indexes directly")
	fs.Var(c.runtimes, "runtime", "NAME=IMAGE@sha256:… (repeatable): runtime images by digest")
	// Each tenant namespace's ResourceQuota (and LimitRange); the controller's tenant reconciler brings existing tenants to new values.
	options.QuantityVar(fs, &c.kubeQuota.CPU, "tenant-quota-cpu", "CPU limits (and requests) a tenant namespace's pods may have in all (limits.cpu, requests.cpu)")
	options.QuantityVar(fs, &c.kubeQuota.EphemeralStorage, "tenant-quota-ephemeral-storage", "local disk a tenant namespace's pods may request and use in all (requests.ephemeral-storage, limits.ephemeral-storage)")
	fs.Int64Var(&c.kubeQuota.Pods, "tenant-quota-pods", c.kubeQuota.Pods, "pods a tenant namespace may have (pods)")
	options.QuantityVar(fs, &c.kubeQuota.ContainerCPU, "tenant-container-cpu", "CPU limit of a tenant container that sets none, and the most one may set (the LimitRange)")
}

// complete reads what the environment gives (credentials stay out of argv and of usage
// messages) and checks the flags together.
func (c *config) complete() error {
	if c.role == roleConsumer {
		if c.consumer.namespace == "" || c.consumer.apiURL == "" || c.consumer.secretsDir == "" || c.consumer.tokenFile == "" {
			return errors.New("--role=consumer needs --namespace, --api-url, --consumer-secrets-dir and --event-token-file")
		}
		return nil
	}
	if c.eventKeyFile != "" {
		b, err := os.ReadFile(c.eventKeyFile)
		if err != nil {
			return fmt.Errorf("--event-key-file: %w", err)
		}
		if c.eventKey = []byte(strings.TrimSpace(string(b))); len(c.eventKey) < 32 {
			return fmt.Errorf("--event-key-file %s: want at least 32 bytes of key, found %d", c.eventKeyFile, len(c.eventKey))
		}
	}
	c.indexes.ReadEnvironment()
	c.databaseURL = cmp.Or(c.databaseURL, os.Getenv("DATABASE_URL"))
	c.api.PublicURL = cmp.Or(c.api.PublicURL, options.OperatorPublicURL)
	q := c.tenantQuota()
	for _, v := range []resource.Quantity{q.CPU, q.Memory, q.EphemeralStorage, q.ContainerCPU,
		*resource.NewQuantity(q.Pods, resource.DecimalSI), *resource.NewQuantity(q.Functions, resource.DecimalSI)} {
		if v.Sign() <= 0 {
			return errors.New("the --tenant-quota-* and --tenant-container-cpu values must be positive")
		}
	}
	if err := c.api.Validate(); err != nil {
		return err
	}
	if c.role != roleAll && c.role != roleAPI && c.role != roleController {
		return fmt.Errorf("--role %q: want %s, %s, %s or %s", c.role, roleAPI, roleController, roleAll, roleConsumer)
	}
	if c.registry == "" || len(c.runtimes) == 0 {
		return errors.New("--registry and at least one --runtime are required")
	}
	if c.policyGate && c.operatorImage == "" {
		return errors.New("--wait-for-network-policy runs --operator-image's sless: give both")
	}
	if c.role == roleAPI && (c.registryAuthDir != "" || c.pullSecret != "") {
		// The API derives no registry credential (the controller writes tenants' pull secrets and
		// pushes): the registry's keys stay out of the public process.
		return errors.New("--registry-auth-dir and --pull-secret-file are the controller's: --role=api hands out no registry credential")
	}
	if c.registryAuthDir != "" && c.pullSecret != "" {
		return errors.New("--registry-auth-dir (sless's registry) and --pull-secret-file (your own) exclude each other")
	}
	var err error
	if c.tenantEgress.Install, err = c.egressOpt.Install(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		in   []string
		out  *[]netip.Prefix
	}{{"cluster-cidr", c.clusterCIDRs, &c.tenantEgress.Cluster}, {"egress-deny", c.egressDeny, &c.tenantEgress.Deny}} {
		for _, s := range f.in {
			if s = strings.TrimSpace(s); s == "" {
				continue // an empty ConfigMap value
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("--%s %q: want a CIDR such as 10.96.0.0/12: %v", f.name, s, err)
			}
			*f.out = append(*f.out, p.Masked())
		}
	}
	if c.metricsToken, err = c.metrics.Token(); err != nil {
		return err
	}
	return c.auth.Validate()
}

// tenantQuota is every tenant namespace's ResourceQuota and LimitRange.
func (c *config) tenantQuota() resources.TenantQuota {
	q := c.kubeQuota
	q.Functions, q.Memory = c.quota.Functions, c.quota.Memory
	return q
}

func (c *config) servesAPI() bool       { return c.role != roleController }
func (c *config) runsControllers() bool { return c.role != roleAPI }

// newCommand is sless-operator's command line; run gets the parsed and checked configuration.
func newCommand(run func(context.Context, *config) error) *cobra.Command {
	c := &config{runtimes: runtimeFlags{}, kubeQuota: resources.DefaultTenantQuota}
	cmd := &cobra.Command{
		Use:   "sless-operator --registry HOST[:PORT] --runtime NAME=IMAGE@sha256:… [flags]",
		Short: "The Kubernetes backend of sless: the REST API and /fn/, the reconcilers and the autoscaler",
		Long: `sless-operator runs the Kubernetes backend of sless: with --role=api the REST API and the /fn/
proxy, with --role=controller the reconcilers (Function, Trigger, FunctionJob), the autoscaler and
the index proxy on the leader of its Lease, and with --role=all (the default) both in one process.
The package indexes and the database URL, which may carry credentials, come from the environment
($PIP_INDEX_URL, $NPM_REGISTRY, $DATABASE_URL) unless their flags are given.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true, // a failure after the command line was read is not a usage mistake
		SilenceErrors: true, // main prints "sless-operator: <error>"
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.complete(); err != nil {
				return err
			}
			return run(cmd.Context(), c)
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
		return err
	})
	c.addFlags(cmd.Flags())
	return cmd
}

// runtimeFlags is --runtime NAME=IMAGE@sha256:…, repeatable.
type runtimeFlags map[string]string

func (r runtimeFlags) String() string {
	var kv []string
	for k, v := range r {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func (r runtimeFlags) Type() string { return "NAME=IMAGE" }

func (r runtimeFlags) Set(v string) error {
	k, ref, ok := strings.Cut(v, "=")
	if !ok {
		return errors.New("want NAME=IMAGE@sha256:…")
	}
	r[k] = ref
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
