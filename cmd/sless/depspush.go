package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/deps"
)

// depsPushCmd is `sless deps push`: the second half of a dependency Job on Kubernetes (the first
// half is the runtime image running the installer into a shared directory). It layers the
// directory deterministically and pushes it as the one-layer image the deps cache reads.
func depsPushCmd() *cobra.Command {
	var dir, to, prefix string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "push --dir DIR --to REPO:TAG [--prefix /app/deps] [--insecure]",
		Short: "Push installed dependencies as one layer (run by the dependency Job)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return depsPush(cmd.Context(), dir, to, prefix, insecure, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "the installed dependencies (pip --target / node_modules)")
	fs.StringVar(&to, "to", "", "where to push, e.g. registry/sless/deps:<key>")
	fs.StringVar(&prefix, "prefix", "/app/deps", "where the layer puts them: /app/deps (python) or /app/node_modules (node)")
	fs.BoolVar(&insecure, "insecure", false, "allow plain HTTP registries (localhost needs no flag)")
	return cmd
}

func depsPush(ctx context.Context, dir, to, prefix string, insecure bool, stdout, stderr io.Writer) error {
	if dir == "" || to == "" {
		return usageError{"--dir and --to are required"}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--dir %s is not a directory", dir)
	}
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.NewTag(to, append(nopts, name.StrictValidation)...)
	if err != nil {
		return usageError{fmt.Sprintf("--to %q must be REPO:TAG (the cache key is the tag): %v", to, err)}
	}
	l, err := deps.LayerFromDir(dir, prefix)
	if err != nil {
		return err
	}
	defer l.Close()
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, _ := img.Digest()
	ld, _ := l.Digest()
	fmt.Fprintf(stderr, "deps layer %s: %d files\n", ld, l.Files())
	fmt.Fprintln(stdout, ref.Context().Digest(d.String()).String())
	return nil
}
