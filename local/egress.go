package local

import (
	"context"
	"sync"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/local/network"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// egress is objects.Egress on the state file; a namespace's new rule is in the instance's chains
// (local/network) before SetChoice returns.
type egress struct {
	p       *Platform
	choices *state.EgressChoices
	mu      sync.Mutex // one policy switch at a time, in the order of the choices
}

var _ objects.Egress = (*egress)(nil)

func (e *egress) Install() runspec.EgressInstall { return e.p.cfg.Egress }

// Note is empty: the single host enforces every mode.
func (e *egress) Note() string { return "" }

func (e *egress) Choice(ctx context.Context, ns string) (*apiv1.EgressRule, error) {
	return e.choices.Get(ctx, ns)
}

func (e *egress) SetChoice(ctx context.Context, ns string, rule apiv1.EgressRule) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.choices.Set(ctx, ns, rule); err != nil {
		return err
	}
	// Narrowing cuts what the namespace's containers opened before: Confine forgets the
	// instance's connections, as at every start.
	return e.p.confine(ctx)
}

// policy is the confinement for the install's egress configuration and the namespaces' rules: the
// default for functions, jobs and cron runs, and a rule of its own for each namespace the install
// allows more or that chose one. IPv6 destinations are left out: containers have no IPv6.
func (p *Platform) policy(ctx context.Context) (network.Policy, error) {
	install := p.cfg.Egress
	pol := network.Policy{ProxyPort: p.proxyPort(), HostResolvers: true, ConnRate: p.cfg.ConnRate, ConnMax: p.cfg.ConnMax,
		None: install.Default == apiv1.EgressNone, Allow: v4Allows(install.Allow), Namespaces: map[string]network.NamespaceRule{}}
	choices, err := p.db.EgressChoices().All(ctx)
	if err != nil {
		return pol, err
	}
	rule := func(ns string, choice *apiv1.EgressRule) {
		mode, allow := install.Effective(ns, choice)
		pol.Namespaces[ns] = network.NamespaceRule{None: mode == apiv1.EgressNone, Allow: v4Allows(allow)}
	}
	for ns := range install.Namespaces {
		rule(ns, nil)
	}
	for ns, c := range choices {
		rule(ns, &c)
	}
	return pol, nil
}

func v4Allows(in []apiv1.EgressAllow) []network.Allow {
	var out []network.Allow
	for _, a := range in {
		if a.Prefix.Addr().Is4() {
			out = append(out, a)
		}
	}
	return out
}

// confine installs the policy of now.
func (p *Platform) confine(ctx context.Context) error {
	pol, err := p.policy(ctx)
	if err != nil {
		return err
	}
	return p.nets.Confine(ctx, pol)
}
