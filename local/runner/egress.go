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
// register(ctx, ns) chooses and enters under the container's namespace before the container is
// created: the namespace's egress rule holds from its first packet. The default registers nothing.
func (r *Runner) SetRegister(register func(ctx context.Context, ns string) (mac string, err error)) {
	r.register = register
}

// identify gives spec (of a container of namespace ns on the instance's network) its registered MAC.
func (r *Runner) identify(ctx context.Context, spec *podman.Spec, ns string) error {
	if r.register == nil || spec.Network != r.network {
		return nil
	}
	mac, err := r.register(ctx, ns)
	if err != nil {
		return fmt.Errorf("registering the container's address for its namespace's egress rule: %w", err)
	}
	spec.Labels[labelMAC] = mac
	spec.Flags = append(slices.Clone(spec.Flags), "--mac-address", mac)
	return nil
}

// Registrations are the MAC address and namespace of each of the instance's containers on its
// network (MAC → namespace), for the network's sets after a restart (local/network.Sync). A
// container an earlier sless up started without one is asked for the MAC podman gave it.
func (r *Runner) Registrations(ctx context.Context) (map[string]string, error) {
	cs, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
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
			out[strings.ToLower(mac)] = ns
		}
	}
	return out, nil
}
