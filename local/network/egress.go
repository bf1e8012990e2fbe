package network

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strings"
)

// Per-namespace egress. A container's namespace is known by its MAC address, chosen by the runner
// before the container exists (podman --mac-address) and put into the namespace's ipset (hash:mac)
// before it starts, so no container runs a moment under another namespace's rule or none. Tenant
// code holds no capability: it cannot change its MAC. A container whose MAC is in no set of the
// instance (one podman started by hand on the bridge) reaches nothing.

// NamespaceRule is one namespace's egress where it differs from the Policy's default: the outside
// or nothing (None), and the destinations beyond it.
type NamespaceRule struct {
	None  bool
	Allow []Allow
}

// setMaxElem bounds each set: every container start adds a MAC (removed when sless up restarts,
// Sync), far above what one instance starts between restarts.
const setMaxElem = 1 << 20

// setPrefix starts the names of the instance's ipsets (at most 31 characters each).
func (n *Networks) setPrefix() string {
	id := strings.ToLower(n.chain[len("SLESS-"):])
	return "sl" + id[:min(10, len(id))] + "-"
}

// registeredSet holds the MAC of every container the runner registered.
func (n *Networks) registeredSet() string { return n.setPrefix() + "all" }

// namespaceSet holds the MACs of namespace ns's containers.
func (n *Networks) namespaceSet(ns string) string {
	sum := sha256.Sum256([]byte(ns))
	return n.setPrefix() + hex.EncodeToString(sum[:5])
}

// NewMAC is a random locally administered unicast address for a container.
func NewMAC() string {
	b := make([]byte, 6)
	rand.Read(b)
	b[0] = b[0]&0xfc | 0x02
	return net.HardwareAddr(b).String()
}

func ipset(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ipset", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ipset %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func createSet(ctx context.Context, name string) error {
	return ipset(ctx, "create", name, "hash:mac", "maxelem", fmt.Sprint(setMaxElem), "-exist")
}

// Register puts a container's MAC (NewMAC) into namespace ns's set; the container must not start
// before it returns nil.
func (n *Networks) Register(ctx context.Context, ns, mac string) error {
	if _, err := net.ParseMAC(mac); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	for _, s := range []string{n.namespaceSet(ns), n.registeredSet()} {
		if err := createSet(ctx, s); err != nil {
			return err
		}
		if err := ipset(ctx, "add", s, mac, "-exist"); err != nil {
			return err
		}
	}
	return nil
}

// Sync makes the instance's sets hold exactly members (MAC → namespace: the containers that exist),
// each set swapped in whole: what a Register added meanwhile is kept.
func (n *Networks) Sync(ctx context.Context, members map[string]string) error {
	byNS := map[string][]string{}
	var all []string
	for mac, ns := range members {
		byNS[n.namespaceSet(ns)] = append(byNS[n.namespaceSet(ns)], mac)
		all = append(all, mac)
	}
	byNS[n.registeredSet()] = all
	out, err := exec.CommandContext(ctx, "ipset", "list", "-n").Output()
	if err != nil {
		return fmt.Errorf("ipset list: %w", err)
	}
	for _, s := range strings.Fields(string(out)) {
		if strings.HasPrefix(s, n.setPrefix()) && !strings.HasSuffix(s, "-t") {
			if _, ok := byNS[s]; !ok {
				byNS[s] = nil // a namespace without containers now: emptied, kept (a chain may name it)
			}
		}
	}
	names := make([]string, 0, len(byNS))
	for s := range byNS {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		tmp := s + "-t"
		var b strings.Builder
		fmt.Fprintf(&b, "create %s hash:mac maxelem %d -exist\nflush %s\n", tmp, setMaxElem, tmp)
		for _, mac := range byNS[s] {
			fmt.Fprintf(&b, "add %s %s -exist\n", tmp, mac)
		}
		cmd := exec.CommandContext(ctx, "ipset", "restore")
		cmd.Stdin = strings.NewReader(b.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ipset restore: %w: %s", err, out)
		}
		if err := createSet(ctx, s); err != nil {
			return err
		}
		if err := ipset(ctx, "swap", tmp, s); err != nil {
			return err
		}
		if err := ipset(ctx, "destroy", tmp); err != nil {
			return err
		}
	}
	return nil
}

// ensureSets creates the sets the chains of p name.
func (n *Networks) ensureSets(ctx context.Context, p Policy) error {
	names := []string{n.registeredSet()}
	for ns := range p.Namespaces {
		names = append(names, n.namespaceSet(ns))
	}
	for _, s := range names {
		if err := createSet(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// destroySets removes the instance's sets (after its chains, which name them).
func (n *Networks) destroySets(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "ipset", "list", "-n").Output()
	if err != nil {
		return nil // no ipset: nothing of ours
	}
	var errs []string
	for _, s := range strings.Fields(string(out)) {
		if strings.HasPrefix(s, n.setPrefix()) {
			if err := ipset(ctx, "destroy", s); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("network: %s", strings.Join(errs, "; "))
	}
	return nil
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
