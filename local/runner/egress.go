package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/runspec"
)

// labelMAC records the MAC address a container was given, by which the network's per-namespace
// rules know it (local/network: Register, Sync).
const labelMAC = "sless.dev/mac"

// SetRegister makes every function, job and cron container get a MAC address of its own, which
// register(ctx, ns, name) chooses and enters under the container's namespace before the container
// is created (the namespace's egress rule holds from its first packet); unregister(name) hears
// that it was removed. The default registers nothing.
func (r *Runner) SetRegister(register func(ctx context.Context, ns, name string) (mac string, err error), unregister func(name string)) {
	r.register, r.unregister = register, unregister
}

// Registration is a container's MAC address and namespace.
type Registration struct{ MAC, Namespace string }

// identify gives spec (of a container of namespace ns on the instance's network) its registered MAC.
func (r *Runner) identify(ctx context.Context, spec *podman.Spec, ns string) error {
	if r.register == nil || spec.Network != r.network {
		return nil
	}
	mac, err := r.register(ctx, ns, spec.Name)
	if err != nil {
		return fmt.Errorf("registering the container's address for its namespace's egress rule: %w", err)
	}
	spec.Labels[labelMAC] = mac
	spec.Flags = append(slices.Clone(spec.Flags), "--mac-address", mac)
	return nil
}

// Registrations are the MAC address and namespace of each of the instance's containers on its
// network, by name, for the chains after a restart (local/network.Sync). A container an earlier
// sless up started without one is asked for the MAC podman gave it.
func (r *Runner) Registrations(ctx context.Context) (map[string]Registration, error) {
	cs, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]Registration{}
	for _, c := range cs {
		ns := c.Labels[runspec.LabelNamespace]
		if ns == "" || !slices.Contains(c.Networks, r.network) {
			continue
		}
		mac := c.Labels[labelMAC]
		if mac == "" {
			o, err := r.pm.Run(ctx, "inspect", "--format", `{{(index .NetworkSettings.Networks "`+r.network+`").MacAddress}}`, c.ID)
			if err != nil {
				continue // gone meanwhile
			}
			mac = strings.TrimSpace(o)
		}
		if mac != "" {
			out[c.Name] = Registration{MAC: strings.ToLower(mac), Namespace: ns}
		}
	}
	return out, nil
}
