package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set with -ldflags "-X main.version=…".
var version = "dev"

// usageError is a mistake on the command line: exit status 2 and a hint to read --help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sless:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const topUsage = `sless — serverless functions on Kubernetes, built without kaniko or a Docker daemon.

Usage:
  sless up [--data-dir DIR] [--listen 127.0.0.1:8080] [--registry-listen 127.0.0.1:5000]
  sless down [--data-dir DIR]                 remove an instance's containers, networks and firewall chain
  sless build --runtime-image REF --src DIR|FILE.zip --handler MODULE.FUNC --to REPO[:TAG]
  sless runtime build --runtime python3.11|nodejs20 --base REF --to REPO[:TAG]
  sless deps push --dir DIR --to REPO:TAG [--prefix /app/deps]
  sless registry --listen ADDR --root DIR --auth-dir DIR   serve a CNCF Distribution registry with token auth
  sless registry credential --auth-dir DIR --registry HOST[:PORT] platform|node|pull.NAMESPACE
  sless policy-wait [--denied HOST:PORT]       (in a pod) wait until its NetworkPolicy is in force
  sless version

Run 'sless COMMAND --help' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return usageError{"a command is required"}
	}
	switch args[0] {
	case "build":
		return runBuild(ctx, args[1:], stdout, stderr)
	case "up":
		return runUp(ctx, args[1:], stdout, stderr)
	case "down":
		return runDown(ctx, args[1:], stderr)
	case "deps":
		return runDeps(ctx, args[1:], stdout, stderr)
	case "runtime":
		return runRuntime(ctx, args[1:], stdout, stderr)
	case "registry":
		return runRegistry(ctx, args[1:], stdout, stderr)
	case "policy-wait":
		return runPolicyWait(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "sless", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, topUsage)
		return nil
	default:
		fmt.Fprint(stderr, topUsage)
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
}
