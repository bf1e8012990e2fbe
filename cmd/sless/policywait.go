package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// policyWaitCmd is `sless policy-wait`, the first init container of every pod that runs tenant
// code on Kubernetes: NetworkPolicy enforcers (kube-router, and others) apply a new pod's rules a
// moment after it starts, and code that connects in that moment would pass. It returns once a
// connection the tenant policy denies (the Kubernetes API, by default) fails, so the pod's own
// containers start under the policy; it fails after --timeout, when nothing enforces it.
func policyWaitCmd() *cobra.Command {
	var target string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "policy-wait [--denied HOST:PORT]",
		Short: "(in a pod) Wait until its NetworkPolicy is in force",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return policyWait(cmd.Context(), target, timeout, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&target, "denied", "", "host:port the policy denies (default: the Kubernetes API, $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

func policyWait(ctx context.Context, target string, timeout time.Duration, stdout io.Writer) error {
	if target == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return usageError{"--denied is required outside a Kubernetes pod"}
		}
		target = net.JoinHostPort(host, port)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		conn, err := d.DialContext(dctx, "tcp", target)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(stdout, "network policy in force after %v (%s: %v)\n", time.Since(start).Round(time.Millisecond), target, err)
			return nil
		}
		conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is still reachable after %v: no NetworkPolicy is enforced for this pod", target, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
