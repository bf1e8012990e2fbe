package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
)

type registryFlags struct {
	listen, root, authDir, realm, platformConfig string
	sweep                                        bool
}

// registryCmd is `sless registry` (and `sless registry credential`).
func registryCmd() *cobra.Command {
	var f registryFlags
	cmd := &cobra.Command{
		Use:   "registry --listen ADDR --root DIR --auth-dir DIR",
		Short: "Serve a CNCF Distribution registry with token auth",
		Long: `Registry serves the embedded CNCF Distribution registry until interrupted, with token
authentication (sless the issuer, on the same listener): the Kubernetes install's registry, and a
quick one for trying 'sless build' by hand. Its keys live in --auth-dir (created there with a fresh
random key set when empty; on Kubernetes a mounted Secret shared with the operator).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRegistry(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:5000", "address to listen on (port 0 picks a free one)")
	fs.StringVar(&f.root, "root", "", "directory for the registry's storage (required)")
	fs.StringVar(&f.authDir, "auth-dir", "", "directory with the token-signing key and password secret ("+regauth.SigningKeyFile+", "+regauth.SecretFile+"); generated when empty (required)")
	fs.StringVar(&f.realm, "realm", "", "the token endpoint's URL as clients (containerd on a node) reach it (default http://<listen address>/token)")
	fs.BoolVar(&f.sweep, "sweep-at-start", true, "before listening, delete the blobs no manifest references (the layers of deleted images; nothing can be uploading then)")
	fs.StringVar(&f.platformConfig, "write-docker-config", "", "also write a docker config.json with the platform's credential to this file (0600)")
	cmd.AddCommand(registryCredentialCmd())
	return cmd
}

// runRegistry serves the registry until ctx ends.
func runRegistry(ctx context.Context, f registryFlags, stdout, stderr io.Writer) error {
	if f.root == "" {
		return usageError{"--root is required: the directory the registry stores blobs in"}
	}
	if f.authDir == "" {
		return usageError{"--auth-dir is required: the registry serves nothing anonymously"}
	}
	keys, err := regauth.LoadOrCreate(f.authDir)
	if err != nil {
		return err
	}
	s, err := registry.Start(ctx, registry.Config{RootDir: f.root, Addr: f.listen, Log: stderr, Auth: keys, Realm: f.realm, SweepAtStart: f.sweep})
	if err != nil {
		return err
	}
	if st := s.Swept(); st.Blobs > 0 && st.Err == nil {
		fmt.Fprintf(stderr, "sless registry: swept %d unreferenced blobs (%d bytes), kept %d\n", st.Blobs, st.Bytes, st.Kept)
	}
	if f.platformConfig != "" {
		if err := os.WriteFile(f.platformConfig, keys.Platform().DockerConfigJSON(s.Addr()), 0o600); err != nil {
			s.Close()
			return err
		}
	}
	fmt.Fprintln(stdout, s.Addr())
	<-ctx.Done()
	return s.Close()
}

// registryCredentialCmd prints a docker config.json with one identity's credential, derived from
// the registry's keys (created when the directory has none, as `sless registry` would): what an
// install puts into pull secrets and a node's containerd config.
func registryCredentialCmd() *cobra.Command {
	var authDir, host string
	const usage = "usage: sless registry credential --auth-dir DIR --registry HOST[:PORT] platform|node|pull.NAMESPACE"
	cmd := &cobra.Command{
		Use:   "credential --auth-dir DIR --registry HOST[:PORT] platform|node|pull.NAMESPACE",
		Short: "Print a docker config.json with one of the registry's credentials",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{usage}
			}
			return nil
		},
		ValidArgs: []cobra.Completion{"platform", "node", "pull."},
		RunE: func(cmd *cobra.Command, args []string) error {
			if authDir == "" || host == "" {
				return usageError{usage}
			}
			return registryCredential(authDir, host, args[0], cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&authDir, "auth-dir", "", "the registry's keys directory (required)")
	cmd.Flags().StringVar(&host, "registry", "", "the registry's host[:port] as clients name it (required)")
	return cmd
}

func registryCredential(authDir, host, who string, stdout io.Writer) error {
	keys, err := regauth.LoadOrCreate(authDir)
	if err != nil {
		return err
	}
	var c regauth.Credential
	switch {
	case who == "platform":
		c = keys.Platform()
	case who == "node":
		c = keys.Node()
	case strings.HasPrefix(who, "pull."):
		c = keys.TenantPull(strings.TrimPrefix(who, "pull."))
	default:
		return usageError{fmt.Sprintf("unknown identity %q: platform, node or pull.NAMESPACE", who)}
	}
	_, err = fmt.Fprintln(stdout, string(c.DockerConfigJSON(host)))
	return err
}
