package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// runtimeBuildCmd is `sless runtime build`.
func runtimeBuildCmd() *cobra.Command {
	var name, base, to string
	var insecure, quiet bool
	cmd := &cobra.Command{
		Use:   "build --runtime NAME --base REF --to REPO[:TAG]",
		Short: "Build a runtime image: the language base plus sless's server layer",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runtimeBuild(cmd.Context(), name, base, to, insecure, quiet, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "runtime", "", "runtime to build: "+strings.Join(runtimes.Names(), ", "))
	fs.StringVar(&base, "base", "", "language base image (default: the runtime's production base, e.g. python:3.11-slim)")
	fs.StringVar(&to, "to", "", "repository to push to, with an optional :tag")
	fs.BoolVar(&insecure, "insecure", false, "allow plain HTTP registries (localhost needs no flag); TLS certificates are still verified")
	fs.BoolVar(&quiet, "quiet", false, "print only the resulting reference")
	cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(runtimes.Names(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runtimeBuild(ctx context.Context, name, base, to string, insecure, quiet bool, stdout, stderr io.Writer) error {
	rt, ok := runtimes.Lookup(name)
	if !ok {
		return usageError{fmt.Sprintf("--runtime %q is not a runtime; choose one of %s", name, strings.Join(runtimes.Names(), ", "))}
	}
	if to == "" {
		return usageError{"--to is required: the repository to push the runtime image to"}
	}
	if base == "" {
		base = rt.DefaultBase
	}
	modTime, err := sourceDateEpoch()
	if err != nil {
		return usageError{err.Error()}
	}
	b, err := oci.NewBuilder(oci.WithInsecure(insecure), oci.WithModTime(modTime), oci.WithProgress(progressPrinter(stderr, quiet)))
	if err != nil {
		return err
	}
	res, err := b.BuildRuntime(ctx, oci.RuntimeSource{Base: base, Name: rt.Name, Files: rt.Files(), Dir: "/app", Cmd: rt.Cmd, Env: rt.Env})
	if err != nil {
		return err
	}
	defer res.Close()
	ref, err := b.Push(ctx, res, to)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ref.String())
	return nil
}
