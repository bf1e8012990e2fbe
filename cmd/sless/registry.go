package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sless-dev/sless/internal/registry"
)

// runRegistry serves the embedded CNCF Distribution registry until interrupted: the demo's
// registry, and a quick one for trying `sless build` by hand.
func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sless registry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:5000", "address to listen on (port 0 picks a free one)")
	root := fs.String("root", "", "directory for the registry's storage (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if *root == "" {
		return usageError{"--root is required: the directory the registry stores blobs in"}
	}
	s, err := registry.Start(ctx, registry.Config{RootDir: *root, Addr: *listen, Log: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s.Addr())
	<-ctx.Done()
	return s.Close()
}
