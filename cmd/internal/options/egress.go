package options

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

// Egress is what tenant code (functions, jobs and cron runs) may reach: the install's default
// mode and the destinations beyond it, for every namespace or for one. A namespace's owner may
// narrow it (PUT …/egress), never widen it.
type Egress struct {
	defaultMode string
	allow       []string
}

// AddFlags declares --egress-default and --egress-allow on fs.
func (o *Egress) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.defaultMode, "egress-default", string(apiv1.EgressInternet), "what functions, jobs and cron runs reach unless their namespace narrows it: internet (the outside: never the platform, the cluster, private, link-local or metadata ranges) or none (only the destinations --egress-allow gives them, and DNS)")
	fs.StringSliceVar(&o.allow, "egress-allow", nil, "[NAMESPACE=]CIDR:PORT (or CIDR:*) functions, jobs and cron runs may reach although it is not the outside (a private range, a LAN or in-cluster database), in every namespace or in NAMESPACE only; repeatable or comma-separated")
}

// Install reads the flags.
func (o *Egress) Install() (runspec.EgressInstall, error) {
	var e runspec.EgressInstall
	if err := e.SetDefault(o.defaultMode); err != nil {
		return e, err
	}
	for _, a := range o.allow {
		if a = strings.TrimSpace(a); a == "" {
			continue // an empty ConfigMap value
		}
		if err := e.AddAllow(a); err != nil {
			return e, err
		}
	}
	return e, nil
}
