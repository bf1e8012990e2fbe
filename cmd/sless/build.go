package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

type buildFlags struct {
	runtimeImage, src, handler, to string
	function, namespace, runtime   string
	insecure, quiet                bool
	maxBytes                       int64
}

// buildCmd is `sless build`.
func buildCmd() *cobra.Command {
	var f buildFlags
	cmd := &cobra.Command{
		Use:   "build --runtime-image REF --src DIR|FILE.zip --handler MODULE.FUNC --to REPO[:TAG] [--insecure]",
		Short: "Build a function image in-process and push it",
		Long: `Build makes a function image in-process (runtime image + one code layer) and pushes only what the
registry lacks. It prints the image by digest (REPO@sha256:…) as the last line of stdout.
SOURCE_DATE_EPOCH sets the image's creation time and file mtimes (default: the Unix epoch).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unexpected argument %q; every input is a flag (see --help)", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBuild(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.runtimeImage, "runtime-image", "", "runtime image to build on (tag or digest; an index gives an index)")
	fs.StringVar(&f.src, "src", "", "the function's code: a directory or a .zip archive")
	fs.StringVar(&f.handler, "handler", "handler.handle", "entry point: python module.function or node file.export")
	fs.StringVar(&f.to, "to", "", "repository to push to, with an optional :tag (pushed by digest without one)")
	fs.StringVar(&f.function, "function", "", "function name, recorded as the dev.sless.function label")
	fs.StringVar(&f.namespace, "namespace", "", "namespace, recorded as the dev.sless.namespace label")
	fs.StringVar(&f.runtime, "runtime", "", "runtime name ("+strings.Join(runtimes.Names(), ", ")+"), recorded as the dev.sless.runtime label; provided requires an executable bootstrap at the code's root")
	fs.BoolVar(&f.insecure, "insecure", false, "allow plain HTTP registries (localhost needs no flag); TLS certificates are still verified")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the resulting reference")
	fs.Int64Var(&f.maxBytes, "max-bytes", layers.DefaultMaxBytes, "limit on the code's uncompressed size in bytes")
	return cmd
}

func runBuild(ctx context.Context, f buildFlags, stdout, stderr io.Writer) error {
	for _, req := range []struct{ name, val, hint string }{
		{"--runtime-image", f.runtimeImage, "the image to build on, e.g. 127.0.0.1:5000/sless/runtime-python3.11:latest"},
		{"--src", f.src, "a directory or a .zip of the function's code"},
		{"--to", f.to, "the repository to push to, e.g. 127.0.0.1:5000/fn/hello"},
	} {
		if req.val == "" {
			return usageError{fmt.Sprintf("%s is required: %s", req.name, req.hint)}
		}
	}
	modTime, err := sourceDateEpoch()
	if err != nil {
		return usageError{err.Error()}
	}

	progress := progressPrinter(stderr, f.quiet)
	b, err := oci.NewBuilder(oci.WithInsecure(f.insecure), oci.WithModTime(modTime), oci.WithProgress(progress),
		oci.WithLayerOptions(layers.WithMaxBytes(f.maxBytes)))
	if err != nil {
		return err
	}
	src := oci.Source{RuntimeImage: f.runtimeImage, Handler: f.handler, Function: f.function, Namespace: f.namespace, Runtime: f.runtime}
	if f.runtime != "" {
		rt, ok := runtimes.Lookup(f.runtime)
		if !ok {
			return usageError{fmt.Sprintf("--runtime %q is not a runtime; choose one of %s", f.runtime, strings.Join(runtimes.Names(), ", "))}
		}
		src.Executable = rt.Executable // provided: the code must hold an executable bootstrap
	}
	st, err := os.Stat(f.src)
	if err != nil {
		return fmt.Errorf("--src %s: %w; give a directory or a .zip file", f.src, err)
	}
	if st.IsDir() {
		src.Dir = os.DirFS(f.src)
	} else {
		zf, err := os.Open(f.src)
		if err != nil {
			return fmt.Errorf("--src: %w", err)
		}
		defer zf.Close()
		src.Zip, src.ZipSize = zf, st.Size()
	}

	start := time.Now()
	res, err := b.Build(ctx, src)
	if err != nil {
		return explain(err)
	}
	defer res.Close()
	built := time.Since(start)
	ref, err := b.Push(ctx, res, f.to)
	if err != nil {
		return explain(err)
	}
	if !f.quiet {
		fmt.Fprintf(stderr, "done: built in %d ms, pushed in %d ms\n", built.Milliseconds(), (time.Since(start) - built).Milliseconds())
	}
	fmt.Fprintln(stdout, ref.String())
	return nil
}

// explain adds how to fix it to the errors a user can cause.
func explain(err error) error {
	hints := []struct {
		target error
		hint   string
	}{
		{layers.ErrUnsafePath, "rename or remove that entry; paths must be relative, inside the function, with / separators"},
		{layers.ErrUnsupportedType, "replace links and special files with regular files"},
		{layers.ErrDuplicate, "keep one entry per name (names must differ by more than case)"},
		{layers.ErrTooManyEntries, "remove files the function does not need (e.g. tests, .git)"},
		{layers.ErrTooLarge, "remove large files the function does not need, or raise --max-bytes"},
		{layers.ErrCompressionRatio, "the archive expands implausibly (a zip bomb?); re-create it from the source files"},
		{layers.ErrInvalidArchive, "re-create the archive with `zip -r code.zip .` or pass the directory to --src"},
		{layers.ErrNotExecutable, "a provided function runs the executable `bootstrap` at the code's root: build it there (e.g. `CGO_ENABLED=0 go build -o bootstrap`) or `chmod +x bootstrap`, then zip with Unix modes (`zip -r`)"},
	}
	for _, h := range hints {
		if errors.Is(err, h.target) {
			return fmt.Errorf("%w\n  fix: %s", err, h.hint)
		}
	}
	return err
}

func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0), nil
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q must be a non-negative number of seconds", v)
	}
	return time.Unix(sec, 0), nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// progressPrinter prints the builder's progress on stderr, a line per stage and per MiB pushed.
func progressPrinter(stderr io.Writer, quiet bool) func(oci.Progress) {
	if quiet {
		return func(oci.Progress) {}
	}
	lastSent := int64(-1)
	return func(p oci.Progress) {
		if p.Stage == "push" && p.Message == "uploading" {
			if p.Sent-lastSent < 1<<20 {
				return
			}
			lastSent = p.Sent
			fmt.Fprintf(stderr, "push: %s uploaded\n", humanBytes(p.Sent))
			return
		}
		fmt.Fprintf(stderr, "%s: %s\n", p.Stage, p.Message)
	}
}
