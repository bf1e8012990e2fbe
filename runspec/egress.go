package runspec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
)

// EgressInstall is what an install lets tenant code (functions, jobs, cron runs; never
// dependency installs) reach: a default mode and, beyond it, destinations for every namespace or
// for one. A namespace's owner may narrow it (apiv1.NarrowerEgress), never widen it.
type EgressInstall struct {
	// Default is the mode of a namespace that chose none; "" is apiv1.EgressInternet.
	Default apiv1.EgressMode
	// Allow are destinations every namespace may reach; Namespaces those of one namespace.
	Allow      []apiv1.EgressAllow
	Namespaces map[string][]apiv1.EgressAllow
}

// AddAllow reads one --egress-allow: "[NAMESPACE=]CIDR:PORT" (or CIDR:*, or a bare CIDR).
func (e *EgressInstall) AddAllow(s string) error {
	ns, dst, scoped := strings.Cut(s, "=")
	if !scoped {
		dst, ns = s, ""
	} else if err := apiv1.ValidName("namespace", ns); err != nil {
		return fmt.Errorf("egress-allow %q: %w", s, err)
	}
	a, err := apiv1.ParseEgressAllow(dst)
	if err != nil {
		return fmt.Errorf("egress-allow %q: %w", s, err)
	}
	if !scoped {
		e.Allow = append(e.Allow, a)
		return nil
	}
	if e.Namespaces == nil {
		e.Namespaces = map[string][]apiv1.EgressAllow{}
	}
	e.Namespaces[ns] = append(e.Namespaces[ns], a)
	return nil
}

// SetDefault reads --egress-default.
func (e *EgressInstall) SetDefault(mode string) error {
	if m := apiv1.EgressMode(mode); m != apiv1.EgressInternet && m != apiv1.EgressNone {
		return fmt.Errorf("egress-default %q: want %q or %q", mode, apiv1.EgressInternet, apiv1.EgressNone)
	}
	e.Default = apiv1.EgressMode(mode)
	return nil
}

// Permitted is the most namespace ns may have: the default mode and every destination the install
// allows it, in canonical form.
func (e EgressInstall) Permitted(ns string) apiv1.EgressRule {
	r := apiv1.EgressRule{Mode: cmp.Or(e.Default, apiv1.EgressInternet), Allow: []string{}}
	for _, a := range append(slices.Clone(e.Allow), e.Namespaces[ns]...) {
		if s := a.String(); !slices.Contains(r.Allow, s) {
			r.Allow = append(r.Allow, s)
		}
	}
	return r
}

// Effective is what ns's tenant code may reach: the namespace's choice (nil: it made none, and
// gets all the install permits) within what the install permits now — an install narrowed after
// the choice was made wins.
func (e EgressInstall) Effective(ns string, choice *apiv1.EgressRule) (apiv1.EgressMode, []apiv1.EgressAllow) {
	permitted := e.Permitted(ns)
	pm, pa, _ := apiv1.ParseEgressRule(permitted)
	if choice == nil {
		return pm, pa
	}
	cm, ca, err := apiv1.ParseEgressRule(*choice)
	if err != nil {
		// A choice that no longer reads (written by hand): the narrowest rule, not the widest.
		return apiv1.EgressNone, nil
	}
	mode := cm
	if pm == apiv1.EgressNone {
		mode = apiv1.EgressNone
	}
	var allow []apiv1.EgressAllow
	for _, a := range ca {
		if slices.ContainsFunc(pa, func(p apiv1.EgressAllow) bool { return p.Covers(a) }) {
			allow = append(allow, a)
		}
	}
	return mode, allow
}
