package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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

// run executes one command line. Mistakes cobra finds (an unknown command or flag, a missing
// argument) come back as usageError, as do those a command's own checks find.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	started := false
	root := newRoot(func() { started = true })
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil || started {
		return err
	}
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	path := "sless"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	return usageError{fmt.Sprintf("%v\nRun '%s --help' for usage.", err, path)}
}

const (
	groupAuthor   = "author"
	groupPlatform = "platform"
)

// newRoot is the command tree. started is called once the command line is parsed and a command's
// own code runs (so an error before it is the command line's).
func newRoot(started func()) *cobra.Command {
	root := &cobra.Command{
		Use:   "sless",
		Short: "sless — serverless functions on Kubernetes or one host, built without kaniko or a Docker daemon",
		Long: `sless — serverless functions on Kubernetes or one host, built without kaniko or a Docker daemon.

Author commands talk to a sless API as one user. They read the endpoint and token from
$XDG_CONFIG_HOME/sless/config.yaml (written by 'sless login'; default ~/.config/sless/config.yaml);
SLESS_ENDPOINT and SLESS_API_TOKEN override it, and are enough without a config file.`,
		Version:       version,
		SilenceErrors: true, // main prints "sless: <error>" and picks the exit status
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// cobra checks these after this hook; mistakes on the command line are usage errors.
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return err
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return err
			}
			started()
			return nil
		},
		// No Args: cobra's own check answers an unknown command with suggestions.
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usageError{"a command is required"}
		},
	}
	root.SetVersionTemplate("sless {{.Version}}\n")
	root.AddGroup(&cobra.Group{ID: groupAuthor, Title: "Function author commands (talk to a sless API):"},
		&cobra.Group{ID: groupPlatform, Title: "Platform commands (run or build parts of sless):"})
	root.SetHelpCommandGroupID(groupAuthor)
	root.SetCompletionCommandGroupID(groupAuthor)

	for _, c := range []*cobra.Command{loginCmd(), fnCmd(), invokeCmd(), logsCmd(), jobsCmd(), triggersCmd(), deadLettersCmd(), secretCmd(), egressCmd()} {
		c.GroupID = groupAuthor
		root.AddCommand(c)
	}

	deps := group("deps", "Dependency layers")
	deps.AddCommand(depsPushCmd())
	rt := group("runtime", "Runtime images")
	rt.AddCommand(runtimeBuildCmd())
	for _, c := range []*cobra.Command{
		upCmd(runUp), downCmd(), buildCmd(), rt, deps, registryCmd(), policyWaitCmd(),
		{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "sless", version) },
		},
	} {
		c.GroupID = groupPlatform
		root.AddCommand(c)
	}
	return root
}

func helpContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// group is a command that only holds subcommands; run alone or with an unknown subcommand it is
// a usage error.
func group(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Sprintf("unknown command %q for %q\nRun '%s --help' for usage.", args[0], cmd.CommandPath(), cmd.CommandPath())}
			}
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return usageError{fmt.Sprintf("%s needs a subcommand", cmd.CommandPath())}
		},
	}
}
