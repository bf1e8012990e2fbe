package network

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"slices"
	"sort"
)

// Per-namespace egress. A container's namespace is known by its MAC address, chosen by the runner
// before the container exists (podman --mac-address) and written into the chains (a rule per
// container, -m mac) before it starts, so no container runs a moment under another namespace's
// rule or none. Tenant code holds no capability: it cannot change its MAC. A container the runner
// did not register (one podman started by hand on the bridge) reaches nothing. (This kernel has no
// hash:mac ipset; the rules are few: one per container of the instance.)

// NamespaceRule is one namespace's egress where it differs from the Policy's default: the outside
// or nothing (None), and the destinations beyond it.
type NamespaceRule struct {
	None  bool
	Allow []Allow
}

// Member is one registered container: its MAC address and namespace.
type Member struct{ MAC, Namespace string }

// NewMAC is a random locally administered unicast address for a container.
func NewMAC() string {
	b := make([]byte, 6)
	rand.Read(b)
	b[0] = b[0]&0xfc | 0x02
	return net.HardwareAddr(b).String()
}

// Register enters container name (of namespace ns, with MAC mac) into the chains; the container
// must not start before it returns nil.
func (n *Networks) Register(ctx context.Context, name, ns, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	n.amu.Lock()
	defer n.amu.Unlock()
	if n.members == nil {
		n.members = map[string]Member{}
	}
	prev, had := n.members[name]
	n.members[name] = Member{MAC: hw.String(), Namespace: ns}
	if err := n.assertLocked(ctx); err != nil {
		if had {
			n.members[name] = prev
		} else {
			delete(n.members, name)
		}
		return err
	}
	return nil
}

// Unregister forgets container name (removed): its rule goes with the next change of the chains.
func (n *Networks) Unregister(name string) {
	n.amu.Lock()
	delete(n.members, name)
	n.amu.Unlock()
}

// Sync makes the registered containers exactly members (by container name: those that exist,
// after a restart) and installs the chains for them.
func (n *Networks) Sync(ctx context.Context, members map[string]Member) error {
	n.amu.Lock()
	defer n.amu.Unlock()
	n.members = map[string]Member{}
	for name, m := range members {
		hw, err := net.ParseMAC(m.MAC)
		if err != nil {
			continue
		}
		n.members[name] = Member{MAC: hw.String(), Namespace: m.Namespace}
	}
	return n.assertLocked(ctx)
}

// sortedNamespaces are p's namespaces in a fixed order (the rendering is compared as text).
func sortedNamespaces(p Policy) []string {
	out := make([]string, 0, len(p.Namespaces))
	for ns := range p.Namespaces {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// sortedMembers are the registered containers by name.
func (n *Networks) sortedMembers() []Member {
	names := make([]string, 0, len(n.members))
	for name := range n.members {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]Member, 0, len(names))
	for _, name := range names {
		out = append(out, n.members[name])
	}
	return out
}
