package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

func runRuntime(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build" {
		return usageError{"usage: sless runtime build --runtime NAME --base REF --to REPO[:TAG] [--insecure]"}
	}
	fs := flag.NewFlagSet("sless runtime build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("runtime", "", "runtime to build: "+strings.Join(runtimes.Names(), ", "))
	base := fs.String("base", "", "language base image (default: the runtime's production base, e.g. python:3.11-slim)")
	to := fs.String("to", "", "repository to push to, with an optional :tag")
	insecure := fs.Bool("insecure", false, "allow plain HTTP registries (localhost needs no flag); TLS certificates are still verified")
	quiet := fs.Bool("quiet", false, "print only the resulting reference")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	rt, ok := runtimes.Lookup(*name)
	if !ok {
		return usageError{fmt.Sprintf("--runtime %q is not a runtime; choose one of %s", *name, strings.Join(runtimes.Names(), ", "))}
	}
	if *to == "" {
		return usageError{"--to is required: the repository to push the runtime image to"}
	}
	if *base == "" {
		*base = rt.DefaultBase
	}
	modTime, err := sourceDateEpoch()
	if err != nil {
		return usageError{err.Error()}
	}
	b, err := oci.NewBuilder(oci.WithInsecure(*insecure), oci.WithModTime(modTime), oci.WithProgress(progressPrinter(stderr, *quiet)))
	if err != nil {
		return err
	}
	res, err := b.BuildRuntime(ctx, oci.RuntimeSource{Base: *base, Name: rt.Name, Files: rt.Files(), Dir: "/app", Cmd: rt.Cmd, Env: rt.Env})
	if err != nil {
		return err
	}
	defer res.Close()
	ref, err := b.Push(ctx, res, *to)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ref.String())
	return nil
}
