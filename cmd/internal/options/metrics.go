package options

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// The metrics listeners' addresses by default: the single host's on loopback (nothing off the
// host reaches it, nor do tenant containers: local/network), a pod's on its pod IP (the install's NetworkPolicies say
// who reaches it). Never the public listener's: the series name every tenant's functions.
const (
	UpMetricsListen       = "127.0.0.1:9091"
	OperatorMetricsListen = ":9091"
)

// Metrics configures where /metrics is served (api.MetricsHandler): a listener of its own, and
// optionally a platform scrape token.
type Metrics struct {
	// Addr is the address /metrics serves on; "" is the binary's default (UpMetricsListen,
	// OperatorMetricsListen).
	Addr      string
	TokenFile string
}

// AddFlags declares the metrics flags on fs.
func (o *Metrics) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "metrics-listen", "", "address Prometheus scrapes /metrics on, apart from --listen (which answers 404 for it: the series name every tenant's namespace and functions) (default "+UpMetricsListen+" for sless up, "+OperatorMetricsListen+" for sless-operator)")
	fs.StringVar(&o.TokenFile, "metrics-token-file", "", "also require this file's token on /metrics, sent as Authorization: Bearer <token> (Prometheus: authorization.credentials_file); read at start; no tenant's JWT opens it")
}

// Address is --metrics-listen, or def when it was not given.
func (o *Metrics) Address(def string) string {
	if o.Addr == "" {
		return def
	}
	return o.Addr
}

// Token is --metrics-token-file's token ("" without the flag): one line of visible ASCII, which
// an HTTP header can carry as it is. The binaries read it with the command line, before anything
// starts.
func (o *Metrics) Token() (string, error) {
	if o.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.TokenFile)
	if err != nil {
		return "", fmt.Errorf("--metrics-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--metrics-token-file %s is empty: put the scrape token in it", o.TokenFile)
	}
	for _, c := range token {
		if c <= ' ' || c > '~' {
			return "", fmt.Errorf("--metrics-token-file %s: the token must be one line of visible ASCII, with no spaces", o.TokenFile)
		}
	}
	return token, nil
}

// Listen listens on --metrics-listen (def when not given), for api.MetricsHandler.
func (o *Metrics) Listen(def string) (net.Listener, error) {
	addr := o.Address(def)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	return ln, nil
}
