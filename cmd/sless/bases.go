package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/sless-dev/sless/local/runtimeimages"
)

// ownBasesScript is hack/build-bases.sh of the tree this binary comes from: the executable's
// (bin/sless of `make build`, or sless at the tree's root), else the module source it was built
// from (recorded by a build without -trimpath). Never the working directory's: `sless up` started
// in a directory someone else can write must not run their script as root. "" when there is none.
func ownBasesScript() string {
	var roots []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(exe)), filepath.Dir(exe))
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		roots = append(roots, filepath.Dir(filepath.Dir(filepath.Dir(file)))) // <root>/cmd/sless/bases.go
	}
	for _, root := range roots {
		p := filepath.Join(root, "hack", "build-bases.sh")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// checkBasesScript refuses a --bases-script that is not an absolute path to a file: a relative one
// would be looked up in whatever directory `sless up` was started from.
func checkBasesScript(script string) error {
	if script == "" {
		return nil
	}
	if !filepath.IsAbs(script) {
		return usageError{fmt.Sprintf("--bases-script %q: give an absolute path (a relative one would run whatever the working directory holds), or '' to never build", script)}
	}
	if fi, err := os.Stat(script); err != nil || !fi.Mode().IsRegular() {
		return usageError{fmt.Sprintf("--bases-script %q: no such file", script)}
	}
	return nil
}

// buildBases runs script for every runtime whose base layout is missing from basesDir; notReady
// says so meanwhile.
func buildBases(ctx context.Context, notReady func(string), basesDir, script string, progress io.Writer) error {
	for _, rt := range runtimeimages.Missing(basesDir) {
		if script == "" {
			return fmt.Errorf("the %s base image is missing from %s; build it with hack/build-bases.sh %s, or give its absolute path in --bases-script", rt, basesDir, rt)
		}
		notReady("building the " + rt + " base image (first start only; a few minutes)")
		fmt.Fprintf(progress, "sless up: building the %s base image from Debian packages with %s (first start only, a few minutes)…\n", rt, script)
		cmd := exec.CommandContext(ctx, "bash", script, rt)
		cmd.Stdout, cmd.Stderr = io.Discard, progress
		cmd.Env = append(os.Environ(), "SLESS_CACHE="+filepath.Dir(basesDir))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building the %s base with %s: %w", rt, script, err)
		}
	}
	return nil
}
