package options

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// The servers' listen addresses and public URLs by default: the single host serves on loopback,
// a pod on every interface. The help text of --listen and --public-url names them, since the two
// binaries differ there.
const (
	UpListen          = "127.0.0.1:8080"
	OperatorListen    = ":8080"
	OperatorPublicURL = "http://127.0.0.1:8080"
)

// API configures the REST API and /fn/ (package api).
type API struct {
	// Listen is the address the API and /fn/ serve on; "" is the binary's default (UpListen,
	// OperatorListen).
	Listen string
	// PublicURL is the base URL users reach the API at; "" is the binary's default.
	PublicURL      string
	FunctionDomain string
	UploadLimit    int64
	UploadRate     float64
	UploadBurst    int
	MaxHeld        int
	// BlockRuntimes are the runtimes the install blocks (apiv1.RuntimePolicy.Blocked).
	BlockRuntimes []string
}

// AddFlags declares the API's flags on fs.
func (o *API) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", "", "address the REST API and /fn/ serve on (default "+UpListen+" for sless up, "+OperatorListen+" for sless-operator)")
	fs.StringVar(&o.PublicURL, "public-url", "", "base URL users reach the API and /fn/ at, as function URLs show it (default: http:// and the address sless up listens on; "+OperatorPublicURL+" for sless-operator)")
	fs.StringVar(&o.FunctionDomain, "fn-domain", "", "also serve each function at its own origin https://<name>--<namespace>.<domain>/ (point a wildcard DNS record and certificate at the API; no host below it serves the API). Use a domain of its own, ideally on the Public Suffix List")
	fs.Int64Var(&o.UploadLimit, "upload-limit", api.DefaultUploadLimit, "largest code archive an upload may send, in bytes (413 payload_too_large beyond)")
	fs.Float64Var(&o.UploadRate, "upload-rate", api.DefaultUploadsPerMinute, "code uploads a namespace may make per minute on average (429 throttled beyond; 0 for no limit)")
	fs.IntVar(&o.UploadBurst, "upload-burst", api.DefaultUploadBurst, "code uploads a namespace may make at once above --upload-rate")
	fs.IntVar(&o.MaxHeld, "max-held", api.DefaultMaxHeld, "requests of one function /fn/ holds while every instance is busy or none is ready yet (429 throttled beyond)")
	fs.StringSliceVar(&o.BlockRuntimes, "block-runtime", nil, "a runtime no function may be created on or moved to (400 naming its replacement; GET /v1/runtimes shows it blocked); functions already on it keep running and may be updated in place, with a warning. Repeatable or comma-separated; one of "+strings.Join(apiv1.Runtimes(), ", "))
}

// Validate checks the flags of the group that api.New would refuse: --block-runtime names
// runtimes of the catalog.
func (o *API) Validate() error {
	if err := o.RuntimePolicy().Validate(); err != nil {
		var ae *apiv1.Error
		if errors.As(err, &ae) {
			return fmt.Errorf("--block-runtime: %s", ae.Message)
		}
		return fmt.Errorf("--block-runtime: %w", err)
	}
	return nil
}

// RuntimePolicy is the install's view of the runtime catalog: the runtimes --block-runtime
// blocks (empty entries, as an empty ConfigMap value gives, ignored).
func (o *API) RuntimePolicy() apiv1.RuntimePolicy {
	var p apiv1.RuntimePolicy
	for _, b := range o.BlockRuntimes {
		if b = strings.TrimSpace(b); b != "" {
			p.Blocked = append(p.Blocked, b)
		}
	}
	return p
}

// Address is --listen, or def when it was not given.
func (o *API) Address(def string) string {
	if o.Listen == "" {
		return def
	}
	return o.Listen
}

// ServerOptions are api.New's options for what the flags say, then extra (the verifier, the
// logger, readiness: what the binary makes). PublicURL must be final.
func (o *API) ServerOptions(extra ...api.Option) []api.Option {
	return append([]api.Option{api.WithPublicURL(o.PublicURL), api.WithFunctionDomain(o.FunctionDomain), api.WithUploadLimit(o.UploadLimit),
		api.WithUploadRate(o.UploadRate, o.UploadBurst), api.WithMaxHeld(o.MaxHeld), api.WithRuntimePolicy(o.RuntimePolicy())}, extra...)
}
