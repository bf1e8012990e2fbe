package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/runtimes"
)

func fnCmd() *cobra.Command {
	c := group("fn", "Deploy, list, inspect and delete functions")
	c.Aliases = []string{"function", "functions"}
	c.AddCommand(fnDeployCmd(), fnListCmd(), fnGetCmd(), fnEventsCmd(), fnRemoveCmd())
	return c
}

type deployFlags struct {
	name, runtime, entrypoint                      string
	env, secretEnv, secretFiles                    []string
	memoryMB, timeoutSec, minReplicas, maxReplicas int
	wait                                           time.Duration
}

func fnDeployCmd() *cobra.Command {
	var f deployFlags
	c := &cobra.Command{
		Use:   "deploy DIR --name NAME --runtime RUNTIME",
		Short: "Create or update a function from a directory, upload its code and wait until it is Ready",
		Long: `Deploy ensures your namespace, zips DIR (sorted, fixed times; .git and .terraform left out;
symlinks and special files refused), creates the function or updates its spec, uploads the code and
follows the build until the function is Ready, printing each stage (the function's events: Stored,
InstallingDependencies, Building, Pushing, Built, Starting, Ready) with its message. When the build
or the start fails it prints the failed stage, the platform's message and the last 20 lines of the
build log (of the instances' log when the function failed to start), and exits non-zero.

--secret-env NAME=SECRET/KEY sets a variable from a secret's key, --secret-file DIR=SECRET mounts a
secret as a directory of read-only files, one per key, DIR under /var/run/secrets/ (see 'sless
secret set'). The secrets' values are not part of the image: a new value restarts the function.

On an existing function, a setting whose flag is not given keeps its value; --env, --secret-env
and --secret-file each replace all of the function's entries of their kind.`,
		Example: `  sless fn deploy ./hello --name hello --runtime python3.11
  sless fn deploy . --name api --runtime nodejs22 --entrypoint index.handle --env MODE=prod --max-replicas 5
  sless fn deploy . --name api --secret-env DB_URL=db/url --secret-file /var/run/secrets/tls=tls`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return deploy(cmd, args[0], f)
		},
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.name, "name", "", "the function's name (a DNS label: lowercase letters, digits, '-')")
	fl.StringVar(&f.runtime, "runtime", "", "runtime: "+strings.Join(runtimes.Names(), ", ")+" (required to create)")
	fl.StringVar(&f.entrypoint, "entrypoint", "handler.handle", "handler: python module.function or node file.export")
	fl.StringArrayVar(&f.env, "env", nil, "an environment variable K=V (repeat the flag for more)")
	fl.StringArrayVar(&f.secretEnv, "secret-env", nil, "an environment variable from a secret, NAME=SECRET/KEY (repeat the flag for more)")
	fl.StringArrayVar(&f.secretFiles, "secret-file", nil, "a secret's keys as files in a directory, "+apiv1.SecretFilesRoot+"DIR=SECRET (repeat the flag for more)")
	fl.IntVar(&f.memoryMB, "memory-mb", 0, "memory limit in MiB (0: the platform's default)")
	fl.IntVar(&f.timeoutSec, "timeout-sec", 0, "request timeout in seconds (0: the platform's default)")
	fl.IntVar(&f.minReplicas, "min-replicas", 0, "instances kept running when idle")
	fl.IntVar(&f.maxReplicas, "max-replicas", 0, "most instances (0: the platform's default)")
	fl.DurationVar(&f.wait, "wait-timeout", 10*time.Minute, "how long to wait for Ready")
	c.MarkFlagRequired("name")
	c.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(runtimes.Names(), cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("name", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return listNames(cmd, functionNames, toComplete)
	})
	return c
}

func parseEnv(kvs []string) (map[string]string, error) { return parsePairs("--env", "K=V", kvs) }

// parsePairs reads a repeated flag of K=V pairs.
func parsePairs(flag, form string, kvs []string) (map[string]string, error) {
	env := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Sprintf("%s %q must be %s", flag, kv, form)}
		}
		if _, dup := env[k]; dup {
			return nil, usageError{fmt.Sprintf("%s %s is given twice", flag, k)}
		}
		env[k] = v
	}
	return env, nil
}

// parseSecretRefs reads --secret-env and --secret-file and checks them with the API's own rules
// (names the runtime reserves are left to the API), so a mistake is told before the code is sent.
func parseSecretRefs(f deployFlags) (env, files map[string]string, err error) {
	if env, err = parsePairs("--secret-env", "NAME=SECRET/KEY", f.secretEnv); err != nil {
		return nil, nil, err
	}
	if files, err = parsePairs("--secret-file", apiv1.SecretFilesRoot+"DIR=SECRET", f.secretFiles); err != nil {
		return nil, nil, err
	}
	msg := func(err error) error { return usageError{err.(*apiv1.Error).Message} }
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := apiv1.ValidSecretEnvName(k, func(string) bool { return false }); err != nil {
			return nil, nil, msg(err)
		}
		if _, _, err := apiv1.SplitSecretRef(env[k]); err != nil {
			return nil, nil, usageError{"--secret-env " + k + ": " + err.(*apiv1.Error).Message}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := apiv1.ValidSecretFilesPath(p); err != nil {
			return nil, nil, msg(err)
		}
		if err := apiv1.ValidName("secret", files[p]); err != nil {
			return nil, nil, usageError{"--secret-file " + p + ": " + err.(*apiv1.Error).Message}
		}
	}
	return env, files, nil
}

func deploy(cmd *cobra.Command, dir string, f deployFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	changed := cmd.Flags().Changed
	env, err := parseEnv(f.env)
	if err != nil {
		return err
	}
	secretEnv, secretFiles, err := parseSecretRefs(f)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageError{fmt.Sprintf("%s is not a directory: give the directory holding the function's code", dir)}
	}
	z, sum, err := zipDir(dir)
	if err != nil {
		return err
	}
	// The platform checks the archive with the same rules; checking here says what to fix first.
	if err := layers.ValidateZip(bytes.NewReader(z), int64(len(z))); err != nil {
		return explain(err)
	}
	c, err := apiClient(stderr)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if err := c.EnsureNamespace(ctx); err != nil {
		return fmt.Errorf("ensuring namespace %s: %w", c.Namespace(), err)
	}
	// The events kept before this deploy are not its progress. Without them (an API that keeps
	// none) the progress is the phase's changes.
	events, err := c.WatchEvents(ctx, f.name)
	if err != nil {
		fmt.Fprintf(stderr, "sless: warning: the function's events cannot be read (%v); showing its phase instead\n", err)
		events = nil
	}

	cur, err := c.GetFunction(ctx, f.name)
	switch {
	case client.IsNotFound(err):
		if f.runtime == "" {
			return usageError{fmt.Sprintf("--runtime is required to create function %s (one of %s)", f.name, strings.Join(runtimes.Names(), ", "))}
		}
		spec := apiv1.Function{Name: f.name, Runtime: f.runtime, Entrypoint: f.entrypoint, MemoryMB: f.memoryMB, TimeoutSec: f.timeoutSec,
			MinReplicas: f.minReplicas, MaxReplicas: f.maxReplicas}
		if len(env) > 0 {
			spec.EnvVars = env
		}
		if len(secretEnv) > 0 {
			spec.SecretEnv = secretEnv
		}
		if len(secretFiles) > 0 {
			spec.SecretFiles = secretFiles
		}
		if _, err := c.CreateFunction(ctx, spec); err != nil {
			return fmt.Errorf("creating function %s: %w", f.name, err)
		}
		fmt.Fprintf(stderr, "created function %s in namespace %s\n", f.name, c.Namespace())
	case err != nil:
		return err
	default:
		spec := *cur
		spec.Status = apiv1.FunctionStatus{}
		if changed("runtime") {
			spec.Runtime = f.runtime
		}
		if changed("entrypoint") || spec.Entrypoint == "" {
			spec.Entrypoint = f.entrypoint
		}
		if changed("env") {
			spec.EnvVars = env
		}
		if changed("secret-env") {
			spec.SecretEnv = secretEnv
		}
		if changed("secret-file") {
			spec.SecretFiles = secretFiles
		}
		for _, s := range []struct {
			flag string
			dst  *int
			v    int
		}{{"memory-mb", &spec.MemoryMB, f.memoryMB}, {"timeout-sec", &spec.TimeoutSec, f.timeoutSec},
			{"min-replicas", &spec.MinReplicas, f.minReplicas}, {"max-replicas", &spec.MaxReplicas, f.maxReplicas}} {
			if changed(s.flag) {
				*s.dst = s.v
			}
		}
		if _, err := c.UpdateFunction(ctx, spec); err != nil {
			return fmt.Errorf("updating function %s: %w", f.name, err)
		}
		fmt.Fprintf(stderr, "updated function %s in namespace %s\n", f.name, c.Namespace())
	}

	up, err := c.Upload(ctx, f.name, bytes.NewReader(z), int64(len(z)))
	if err != nil {
		return fmt.Errorf("uploading the code of %s: %w", f.name, err)
	}
	if up.CodeSHA256 != sum {
		return fmt.Errorf("the API stored code sha256 %s, but the archive sent has %s", up.CodeSHA256, sum)
	}
	fmt.Fprintf(stderr, "uploaded %s (sha256 %s)\n", humanBytes(int64(len(z))), sum[:12])

	fn, err := follow(ctx, c, events, f.name, sum, f.wait, stderr)
	if err != nil {
		return err
	}
	if fn.Status.Phase == apiv1.PhaseFailed {
		fl := c.ExplainFailure(ctx, fn)
		fmt.Fprintln(stderr, fl.LogText())
		// "… (phase Failed) at stage Building: why", "… after stage Stored: why" or "…: why".
		return fmt.Errorf("function %s failed (phase %s)%s", f.name, fn.Status.Phase, strings.TrimPrefix(fl.Summary(), "failed"))
	}
	fmt.Fprintf(stdout, "function %s is Ready: %s\n", f.name, fn.Status.URL)
	return nil
}

// follow polls the function until it settles on code sha (client.Settled: Ready, or Failed),
// printing on w each new event (the stages) or, until the first event comes (none if events is
// nil), each change of phase or message.
func follow(ctx context.Context, c *client.Client, events *client.EventWatch, name, sha string, timeout time.Duration, w io.Writer) (*apiv1.Function, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	last, sawEvent := "", false
	for {
		f, err := c.GetFunction(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("function %s: gave up waiting after %s (it may still become Ready: see 'sless fn get %s')", name, time.Since(start).Round(time.Second), name)
			}
			return nil, err
		}
		if events != nil {
			// Read after the status: an event recorded before it is printed before the loop ends.
			evs, err := events.Next(ctx)
			if err != nil && ctx.Err() == nil {
				// Once: an API that keeps no events would say so on every poll.
				fmt.Fprintf(w, "sless: warning: reading the function's events: %v; showing its phase instead\n", err)
				events = nil
			}
			for _, e := range evs {
				sawEvent = true
				fmt.Fprintf(w, "[%5.1fs] %s\n", time.Since(start).Seconds(), termSafe(strings.TrimSuffix(e.Reason+": "+e.Message, ": ")))
			}
		}
		now := string(f.Status.Phase)
		if f.Status.Message != "" {
			now += ": " + termSafe(f.Status.Message) // build and run output: tenant text
		}
		if now != last && (!sawEvent || events == nil) {
			fmt.Fprintf(w, "[%5.1fs] %s\n", time.Since(start).Seconds(), now)
		}
		last = now
		if client.Settled(f, sha) {
			return f, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("function %s is still %s after %s (it keeps going: see 'sless fn get %s')", name, now, time.Since(start).Round(time.Second), name)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func fnListCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your functions",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fns, err := c.ListFunctions(cmd.Context())
			if err != nil {
				return err
			}
			if out != outTable {
				return printStructured(cmd.OutOrStdout(), out, apiv1.List[apiv1.Function]{Items: orEmpty(fns)})
			}
			rows := make([][]string, 0, len(fns))
			for _, f := range fns {
				rows = append(rows, []string{f.Name, f.Runtime, orDash(string(f.Status.Phase)),
					fmt.Sprintf("%d/%d", f.Status.Replicas, f.Status.DesiredReplicas), orDash(f.Status.URL), oneLine(f.Status.Message, 60)})
			}
			return table(cmd.OutOrStdout(), []string{"NAME", "RUNTIME", "PHASE", "REPLICAS", "URL", "MESSAGE"}, rows)
		},
	}
	addOutputFlag(c, &out)
	return c
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func fnGetCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:               "get NAME",
		Short:             "Show one function: its spec and status",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(functionNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			f, err := c.GetFunction(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out != outTable {
				return printStructured(cmd.OutOrStdout(), out, f)
			}
			return describeFunction(cmd.OutOrStdout(), f)
		},
	}
	addOutputFlag(c, &out)
	return c
}

// describeFunction is `fn get`'s table: one field a line. Env values are left out (they may be
// secrets); -o json or yaml shows them.
func describeFunction(w io.Writer, f *apiv1.Function) error {
	envNames := make([]string, 0, len(f.EnvVars))
	for k := range f.EnvVars {
		envNames = append(envNames, k)
	}
	sort.Strings(envNames)
	st := f.Status
	rows := [][]string{
		{"Name:", f.Name},
		{"Runtime:", f.Runtime},
		{"Entrypoint:", orDash(f.Entrypoint)},
		{"Phase:", orDash(string(st.Phase))},
		{"Message:", orDash(termSafe(st.Message))},
		{"URL:", orDash(st.URL)},
		{"Image:", orDash(st.Image)},
		{"Code sha256:", orDash(st.CodeSHA256)},
		{"Memory:", fmt.Sprintf("%d MiB", f.MemoryMB)},
		{"Timeout:", fmt.Sprintf("%d s", f.TimeoutSec)},
		{"Replicas:", fmt.Sprintf("%d ready, %d desired (min %d, max %d, concurrency %d, idle timeout %d s)",
			st.Replicas, st.DesiredReplicas, f.MinReplicas, f.MaxReplicas, f.Concurrency, f.IdleTimeoutSec)},
		{"Env:", orDash(strings.Join(envNames, ", "))},
		// References, not values: which secret and key each name takes.
		{"Secret env:", orDash(pairs(f.SecretEnv))},
		{"Secret files:", orDash(pairs(f.SecretFiles))},
	}
	if st.LastBuiltAt != nil {
		rows = append(rows, []string{"Last built:", st.LastBuiltAt.Format(time.RFC3339)})
	}
	if b := st.Build; b != nil {
		deps := "no dependencies"
		if b.DepsKey != "" {
			deps = "dependencies built"
			if b.DepsCached {
				deps = "dependencies cached"
			}
		}
		rows = append(rows, []string{"Build:", fmt.Sprintf("%s ms, %s", strconv.FormatInt(b.DurationMS, 10), deps)})
		if b.DepsWarning != "" {
			rows = append(rows, []string{"Warning:", termSafe(b.DepsWarning)})
		}
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-13s %s\n", r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

// pairs is "k=v, …" sorted by key.
func pairs(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ", ")
}

func fnRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete functions with their code, images and invocation records",
		Args:    cobra.MinimumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return listNames(cmd, functionNames, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := c.DeleteFunction(cmd.Context(), name); err != nil {
					errs = append(errs, fmt.Errorf("deleting %s: %w", name, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "function %s deleted\n", name)
			}
			return errors.Join(errs...)
		},
	}
}

// zipDir zips a function's directory as the Terraform provider zips source_dir (the same
// directory gives the same archive, so the same code_sha256).
func zipDir(dir string) ([]byte, string, error) {
	b, sum, err := client.ZipDir(dir)
	if err != nil && strings.Contains(err.Error(), "not a regular file") {
		err = fmt.Errorf("%w\n  fix: replace links and special files with regular files", err)
	}
	return b, sum, err
}
