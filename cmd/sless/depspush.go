package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sless-dev/sless/deps"
)

// runDeps is `sless deps push`: the second half of a dependency Job on Kubernetes (the first half
// is the runtime image running the installer into a shared directory). It layers the directory
// deterministically and pushes it as the one-layer image the deps cache reads.
func runDeps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "push" {
		return usageError{"usage: sless deps push --dir DIR --to REPO:KEY [--prefix /app/deps] [--insecure]"}
	}
	fs := flag.NewFlagSet("sless deps push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the installed dependencies (pip --target / node_modules)")
	to := fs.String("to", "", "where to push, e.g. registry/sless/deps:<key>")
	prefix := fs.String("prefix", "/app/deps", "where the layer puts them: /app/deps (python) or /app/node_modules (node)")
	insecure := fs.Bool("insecure", false, "allow plain HTTP registries (localhost needs no flag)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if *dir == "" || *to == "" {
		return usageError{"--dir and --to are required"}
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--dir %s is not a directory", *dir)
	}
	var nopts []name.Option
	if *insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.NewTag(*to, append(nopts, name.StrictValidation)...)
	if err != nil {
		return usageError{fmt.Sprintf("--to %q must be REPO:TAG (the cache key is the tag): %v", *to, err)}
	}
	l, err := deps.LayerFromDir(*dir, *prefix)
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
