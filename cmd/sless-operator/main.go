package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sless-operator:", err)
		os.Exit(1)
	}
}

// run parses the command line and starts what --role says, until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	cmd := newCommand(start)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	return cmd.ExecuteContext(ctx)
}
