package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
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
// argument) come back as usageError, as do those the platform commands' own flag parsing finds.
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

	for _, c := range []*cobra.Command{loginCmd(), fnCmd(), invokeCmd(), logsCmd(), jobsCmd(), triggersCmd()} {
		c.GroupID = groupAuthor
		root.AddCommand(c)
	}

	deps := group("deps", "Dependency layers")
	deps.AddCommand(passthrough("push --dir DIR --to REPO:TAG [--prefix /app/deps]", "Push installed dependencies as one layer (run by the dependency Job)",
		func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runDeps(ctx, append([]string{"push"}, args...), stdout, stderr)
		}))
	rt := group("runtime", "Runtime images")
	rt.AddCommand(passthrough("build --runtime python3.11|nodejs20 --base REF --to REPO[:TAG]", "Build a runtime image: the language base plus sless's server layer",
		func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runRuntime(ctx, append([]string{"build"}, args...), stdout, stderr)
		}))
	reg := passthrough("registry --listen ADDR --root DIR --auth-dir DIR", "Serve a CNCF Distribution registry with token auth", runRegistry)
	reg.AddCommand(passthrough("credential --auth-dir DIR --registry HOST[:PORT] platform|node|pull.NAMESPACE", "Print a docker config.json with one of the registry's credentials",
		func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return runRegistryCredential(args, stdout, stderr)
		}))
	for _, c := range []*cobra.Command{
		passthrough("up [--data-dir DIR] [--listen 127.0.0.1:8080] [--registry-listen 127.0.0.1:5000]", "Run the whole platform on this host (podman)", runUp),
		passthrough("down [--data-dir DIR]", "Remove an instance's containers, networks and firewall chain",
			func(ctx context.Context, args []string, _, stderr io.Writer) error { return runDown(ctx, args, stderr) }),
		passthrough("build --runtime-image REF --src DIR|FILE.zip --handler MODULE.FUNC --to REPO[:TAG]", "Build a function image in-process and push it", runBuild),
		rt, deps, reg,
		passthrough("policy-wait [--denied HOST:PORT]", "(in a pod) Wait until its NetworkPolicy is in force", runPolicyWait),
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

// passthrough is a command that keeps its own flag.FlagSet parsing: cobra hands it every
// argument as given. Its --help (and `sless help X`) is the flag set's usage; its flag names
// complete from that usage.
func passthrough(use, short string, fn func(context.Context, []string, io.Writer, io.Writer) error) *cobra.Command {
	c := &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fn(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
		ValidArgsFunction: func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if !strings.HasPrefix(toComplete, "-") {
				return nil, cobra.ShellCompDirectiveDefault // files
			}
			var out []cobra.Completion
			for _, f := range flagNames(cmd.Context(), fn) {
				if strings.HasPrefix("--"+f, toComplete) {
					out = append(out, "--"+f)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
	}
	c.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if cmd.HasSubCommands() {
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n\nSubcommands:\n", cmd.Short)
			for _, s := range cmd.Commands() {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", cmd.CommandPath(), s.Use)
			}
			fmt.Fprintln(cmd.OutOrStdout())
		}
		fn(helpContext(cmd), []string{"--help"}, cmd.OutOrStdout(), cmd.OutOrStdout())
	})
	return c
}

func helpContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

var flagLine = regexp.MustCompile(`(?m)^\s+-{1,2}([A-Za-z0-9][A-Za-z0-9-]*)`)

// flagNames reads a flag.FlagSet's names from its --help output (the flag package prints
// "  -name type" lines; --help returns before a command does anything).
func flagNames(ctx context.Context, fn func(context.Context, []string, io.Writer, io.Writer) error) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	var buf bytes.Buffer
	fn(ctx, []string{"--help"}, &buf, &buf)
	var names []string
	for _, m := range flagLine.FindAllStringSubmatch(buf.String(), -1) {
		names = append(names, m[1])
	}
	return names
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
