package network

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/local/podman"
)

// Confine installs the confinement with policy p: built beside whatever is in place and switched
// to in one transaction (a restart never opens a window), after which the connections containers
// opened before are forgotten. Ensure keeps it in place from then on.
func (n *Networks) Confine(ctx context.Context, p Policy) error {
	n.amu.Lock()
	defer n.amu.Unlock()
	n.policy, n.applied, n.confined = p, [2][]string{}, true
	return n.assertLocked(ctx)
}

// Restored is one part of the confinement Ensure found missing or changed and put back: Part is
// "bridge", "br_netfilter", "ipv6" (a bridge's IPv6 came back on), "iptables" or "ip6tables".
type Restored struct{ Part, Detail string }

// flight is one check that callers of Ensure wait on.
type flight struct {
	done chan struct{}
	err  error
}

// Ensure checks every part of the confinement — bridges, br_netfilter and IPv6 knobs, the IPv4
// and IPv6 chains and their jumps — and restores what is missing or changed (each reported to
// OnRestore). It returns once a check that began after the call has finished: callers at once
// share one check. A container must not start unless it returns nil.
func (n *Networks) Ensure(ctx context.Context) error {
	n.gmu.Lock()
	f := n.pending
	if f == nil {
		f = &flight{done: make(chan struct{})}
		n.pending = f
		go n.fly(f)
	}
	n.gmu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Networks) fly(f *flight) {
	n.amu.Lock()
	n.gmu.Lock()
	n.pending = nil // who comes from now on waits for the next check
	n.gmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	f.err = n.assertLocked(ctx)
	cancel()
	n.amu.Unlock()
	close(f.done)
}

// families are iptables, and ip6tables where the host has IPv6.
func (n *Networks) families() []family {
	if podman.HostIPv6() {
		return []family{ipv4, ipv6}
	}
	return []family{ipv4}
}

// Guard runs Ensure every interval until ctx ends; failures go to onErr.
func (n *Networks) Guard(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.Ensure(ctx); err != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
}

func (n *Networks) assertLocked(ctx context.Context) error {
	if !n.confined {
		return errors.New("network: Ensure before Confine")
	}
	// Each part is reported as soon as it is back, not when the whole check ends.
	report := func(r Restored) {
		if n.OnRestore != nil {
			n.OnRestore(r)
		}
	}
	for _, net := range []Net{n.Functions, n.Deps} {
		if _, err := os.Stat("/sys/class/net/" + net.Bridge); err != nil {
			if err := n.createBridge(ctx, net); err != nil {
				return err
			}
			report(Restored{"bridge", net.Bridge})
		}
	}
	for _, k := range n.knobs() {
		changed, err := setKnob(k)
		if err != nil {
			return err
		}
		if changed {
			report(Restored{k.part, k.path})
		}
	}
	others := bridgeSubnets(n.Functions.Bridge, n.Deps.Bridge)
	policy := n.policy
	if policy.HostResolvers {
		policy.Nameservers = append(slices.Clone(policy.Nameservers), HostNameservers()...)
	}
	// Both tables at once: each save is tens of milliseconds, and this runs before every start.
	var tables [2]table
	var errs [2]error
	var wg sync.WaitGroup
	for i, f := range n.families() {
		wg.Add(1)
		go func() { defer wg.Done(); tables[i], errs[i] = n.read(ctx, f) }()
	}
	wg.Wait()
	for i, f := range n.families() {
		t, err := tables[i], errs[i]
		if err != nil {
			return err
		}
		want := strings.Join(n.render(f, policy, others, "X"), "\n")
		forget, broken := true, false
		switch {
		case n.applied[i] == nil: // installing (a start): whatever was there is replaced
		case !slices.Equal(t.rules, n.applied[i]):
			broken = true
		case want != n.wanted[i]:
			forget = false // the host's bridges changed: stricter or looser, nothing was open
		default:
			continue
		}
		if err := n.switchTo(ctx, f, t, policy, others); err != nil {
			return err
		}
		if broken {
			report(Restored{strings.TrimSuffix(f.save, "-save"), "chain " + n.chain + " or its jumps"})
		}
		after, err := n.read(ctx, f)
		if err != nil {
			return err
		}
		if after.gen == "" {
			return fmt.Errorf("network: %s shows no jump to %s after installing it", f.save, n.chain)
		}
		n.applied[i], n.wanted[i] = after.rules, want
		if forget && !f.v6 {
			n.forgetPending = true
		}
	}
	// Until it succeeds, every check tries again: a connection opened while the chain was
	// missing must not live on because one flush failed.
	if n.forgetPending {
		if err := n.forgetConnections(ctx); err != nil {
			return err
		}
		n.forgetPending = false
	}
	return nil
}
