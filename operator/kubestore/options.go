package kubestore

import (
	"errors"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/resources"
)

// DefaultOperatorNamespace is the namespace the operator runs in unless WithTenant says another.
const DefaultOperatorNamespace = "sless-system"

// DefaultInvocationRing is how many invocation records per function the in-memory history keeps
// (WithInvocations).
const DefaultInvocationRing = 1000

// Option configures New.
type Option func(*options) error

type options struct {
	provisionTimeout time.Duration
	code             codestore.Store
	tenant           resources.TenantConfig
	cache            client.Client
	resolver         objects.Resolver
	logsConfig       *rest.Config
	logs             objects.Logs
	scaler           activator.Scaler
	invocations      objects.Invocations
	runtimeImages    objects.RuntimeImages
}

func makeOptions(opts ...Option) (*options, error) {
	o := &options{tenant: resources.TenantConfig{OperatorNamespace: DefaultOperatorNamespace}, provisionTimeout: DefaultProvisionTimeout}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.logs != nil && o.logsConfig != nil {
		return nil, errors.New("kubestore: WithLogs and WithPodLogs exclude each other")
	}
	if o.logsConfig != nil && o.code == nil {
		return nil, errors.New("kubestore: WithPodLogs reads the logs of stopped pods from the code store: give WithCodeStore too")
	}
	return o, nil
}

// WithCodeStore is where uploads, build logs, events and the logs of stopped pods live. The
// default is none, which only a backend whose Namespaces alone are used may lack (api.New refuses
// it, see objects.Backend.Validate).
func WithCodeStore(code codestore.Store) Option {
	return func(o *options) error { o.code = code; return nil }
}

// WithTenant is what every tenant namespace gets (Namespaces.Ensure). The default is a
// TenantConfig with only OperatorNamespace set, to DefaultOperatorNamespace: the quota
// resources.DefaultTenantQuota, no pull secret content, no deps egress, no index proxy.
func WithTenant(tenant resources.TenantConfig) Option {
	return func(o *options) error { o.tenant = tenant; return nil }
}

// DefaultProvisionTimeout is WithProvisionTimeout's default.
const DefaultProvisionTimeout = 30 * time.Second

// WithProvisionTimeout bounds how long Namespaces.Ensure waits for the controller to provision a
// new tenant namespace before it answers *objects.NotReadyError (503: call ensure again). The
// default is DefaultProvisionTimeout.
func WithProvisionTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return errors.New("kubestore: WithProvisionTimeout needs a positive duration")
		}
		o.provisionTimeout = d
		return nil
	}
}

// WithCache has /fn/ read what it needs per request (Functions, Triggers, EndpointSlices) through
// c, the manager's informer cache: no round trip, a moment behind the stores. The REST routes keep
// New's client, for read-after-write. The default is New's client for both.
func WithCache(c client.Client) Option {
	return func(o *options) error { o.cache = c; return nil }
}

// WithResolver routes /fn/ to what r answers, and holds no request while a function has no
// instance (Backend.Instances stays nil): for tests with instances of their own. The default is
// an EndpointResolver on the Services' EndpointSlices (read through WithCache's client), which
// also lists the pods that are not ready yet for /fn/'s activator to probe.
func WithResolver(r objects.Resolver) Option {
	return func(o *options) error { o.resolver = r; return nil }
}

// WithPodLogs serves GET …/logs from the function pods (through the kubelet, with a clientset of
// its own made from cfg, see NewLogs) and the logs of stopped pods kept in the code store. The
// default is none: GET …/logs answers 503.
func WithPodLogs(cfg *rest.Config) Option {
	return func(o *options) error { o.logsConfig = cfg; return nil }
}

// WithLogs serves GET …/logs from l. The default is none: GET …/logs answers 503.
func WithLogs(l objects.Logs) Option {
	return func(o *options) error { o.logs = l; return nil }
}

// WithScaler is told when /fn/ holds a request that no instance can take: the controllers'
// Scaler in the same process, or a relay to it (invoke.Pokes). The default is none: a held
// request waits for an instance something else starts.
func WithScaler(s activator.Scaler) Option {
	return func(o *options) error { o.scaler = s; return nil }
}

// WithInvocations keeps the invocation history (api/pgstore in the operator). The default is an
// in-memory ring of the last DefaultInvocationRing records per function, this process's own.
func WithInvocations(inv objects.Invocations) Option {
	return func(o *options) error {
		if inv == nil {
			return errors.New("kubestore: WithInvocations(nil)")
		}
		o.invocations = inv
		return nil
	}
}

// WithRuntimeImages are the runtime images, by digest, the controllers build functions on (the
// operator's --runtime flags): GET /v1/runtimes shows them. The default is none: the runtimes are
// listed without images.
func WithRuntimeImages(images map[string]string) Option {
	return func(o *options) error { o.runtimeImages = objects.RuntimeImageMap(images); return nil }
}
