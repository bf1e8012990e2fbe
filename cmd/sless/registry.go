package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/registry"
)

// runRegistry serves the embedded CNCF Distribution registry until interrupted, with token
// authentication (sless the issuer, on the same listener): the Kubernetes install's registry,
// and a quick one for trying `sless build` by hand. Its keys live in --auth-dir (created there
// with a fresh random key set when empty; on Kubernetes a mounted Secret shared with the operator).
func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "credential" {
		return runRegistryCredential(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("sless registry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:5000", "address to listen on (port 0 picks a free one)")
	root := fs.String("root", "", "directory for the registry's storage (required)")
	authDir := fs.String("auth-dir", "", "directory with the token-signing key and password secret ("+regauth.SigningKeyFile+", "+regauth.SecretFile+"); generated when empty (required)")
	realm := fs.String("realm", "", "the token endpoint's URL as clients (containerd on a node) reach it (default http://<listen address>/token)")
	sweep := fs.Bool("sweep-at-start", true, "before listening, delete the blobs no manifest references (the layers of deleted images; nothing can be uploading then)")
	platformConfig := fs.String("write-docker-config", "", "also write a docker config.json with the platform's credential to this file (0600)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if *root == "" {
		return usageError{"--root is required: the directory the registry stores blobs in"}
	}
	if *authDir == "" {
		return usageError{"--auth-dir is required: the registry serves nothing anonymously"}
	}
	keys, err := regauth.LoadOrCreate(*authDir)
	if err != nil {
		return err
	}
	s, err := registry.Start(ctx, registry.Config{RootDir: *root, Addr: *listen, Log: stderr, Auth: keys, Realm: *realm, SweepAtStart: *sweep})
	if err != nil {
		return err
	}
	if st := s.Swept(); st.Blobs > 0 && st.Err == nil {
		fmt.Fprintf(stderr, "sless registry: swept %d unreferenced blobs (%d bytes), kept %d\n", st.Blobs, st.Bytes, st.Kept)
	}
	if *platformConfig != "" {
		if err := os.WriteFile(*platformConfig, keys.Platform().DockerConfigJSON(s.Addr()), 0o600); err != nil {
			s.Close()
			return err
		}
	}
	fmt.Fprintln(stdout, s.Addr())
	<-ctx.Done()
	return s.Close()
}

// runRegistryCredential prints a docker config.json with one identity's credential, derived from
// the registry's keys (created when the directory has none, as `sless registry` would): what an
// install puts into pull secrets and a node's containerd config.
func runRegistryCredential(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sless registry credential", flag.ContinueOnError)
	fs.SetOutput(stderr)
	authDir := fs.String("auth-dir", "", "the registry's keys directory (required)")
	host := fs.String("registry", "", "the registry's host[:port] as clients name it (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if *authDir == "" || *host == "" || fs.NArg() != 1 {
		return usageError{"usage: sless registry credential --auth-dir DIR --registry HOST[:PORT] platform|node|pull.NAMESPACE"}
	}
	keys, err := regauth.LoadOrCreate(*authDir)
	if err != nil {
		return err
	}
	var c regauth.Credential
	switch who := fs.Arg(0); {
	case who == "platform":
		c = keys.Platform()
	case who == "node":
		c = keys.Node()
	case strings.HasPrefix(who, "pull."):
		c = keys.TenantPull(strings.TrimPrefix(who, "pull."))
	default:
		return usageError{fmt.Sprintf("unknown identity %q: platform, node or pull.NAMESPACE", who)}
	}
	_, err = fmt.Fprintln(stdout, string(c.DockerConfigJSON(*host)))
	return err
}
