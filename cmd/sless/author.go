package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

// cliConfig is $XDG_CONFIG_HOME/sless/config.yaml, written by `sless login`.
type cliConfig struct {
	Endpoint string `json:"endpoint"`
	Token    string `json:"token"`
}

const (
	envEndpoint = "SLESS_ENDPOINT"
	envToken    = "SLESS_API_TOKEN"
)

// configPath is $XDG_CONFIG_HOME/sless/config.yaml; an unset or relative XDG_CONFIG_HOME means
// ~/.config (as the XDG base directory spec says).
func configPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the config directory: %w; set XDG_CONFIG_HOME", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "sless", "config.yaml"), nil
}

// loadConfig reads the config file; a missing file is an empty config. It warns on stderr when
// others can read the token.
func loadConfig(stderr io.Writer) (cliConfig, error) {
	var c cliConfig
	p, err := configPath()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("reading %s: %v; run 'sless login' again to rewrite it", p, err)
	}
	if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(stderr, "sless: warning: %s holds a token and is readable by others (mode %04o); chmod 600 it\n", p, st.Mode().Perm())
	}
	return c, nil
}

// saveConfig writes the config file (mode 0600, its directory 0700) in one rename.
func saveConfig(c cliConfig) (string, error) {
	p, err := configPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".config-*.yaml")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return p, os.Rename(f.Name(), p)
}

// settings are the endpoint and token in force: SLESS_ENDPOINT and SLESS_API_TOKEN, each over the
// config file's value.
func settings(stderr io.Writer) (endpoint, token string, err error) {
	endpoint, token = os.Getenv(envEndpoint), os.Getenv(envToken)
	if endpoint == "" || token == "" {
		c, err := loadConfig(stderr)
		if err != nil {
			return "", "", err
		}
		endpoint, token = firstSet(endpoint, c.Endpoint), firstSet(token, c.Token)
	}
	switch {
	case endpoint == "" && token == "":
		return "", "", errors.New("not logged in: run 'sless login --endpoint URL --token-file FILE', or set " + envEndpoint + " and " + envToken)
	case endpoint == "":
		return "", "", errors.New("no API endpoint: run 'sless login', or set " + envEndpoint)
	case token == "":
		return "", "", errors.New("no API token: run 'sless login', or set " + envToken)
	}
	return endpoint, strings.TrimSpace(token), nil
}

func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// apiClient is a client for the settings in force.
func apiClient(stderr io.Writer) (*client.Client, error) {
	endpoint, token, err := settings(stderr)
	if err != nil {
		return nil, err
	}
	return client.New(endpoint, token, client.WithUserAgent("sless-cli/"+version), client.WithWarningHandler(printWarning(stderr)))
}

// printWarning prints each warning of the API's answers (a function on a deprecated runtime) on
// stderr as kubectl does: "Warning: <text>", without terminal controls.
func printWarning(stderr io.Writer) client.WarningHandler {
	return func(text string) { fmt.Fprintf(stderr, "Warning: %s\n", termSafe(text)) }
}

func loginCmd() *cobra.Command {
	var endpoint, tokenFile string
	c := &cobra.Command{
		Use:   "login --endpoint URL --token-file FILE",
		Short: "Check a token against the API and save the endpoint and token for the other commands",
		Long: `Login reads a JWT from --token-file ('-' for standard input), checks it against the API at once
(ensuring your namespace, as the Terraform provider does) and writes the endpoint and token to
$XDG_CONFIG_HOME/sless/config.yaml (default ~/.config/sless/config.yaml), mode 0600.
SLESS_ENDPOINT and SLESS_API_TOKEN override the file; with both set no login is needed.
'sless up' writes its development token to <data-dir>/dev-token.`,
		Example: "  sless login --endpoint http://127.0.0.1:8080 --token-file ~/.local/share/sless/dev-token",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint == "" {
				endpoint = os.Getenv(envEndpoint)
			}
			if endpoint == "" {
				return usageError{"--endpoint is required: the API's base URL, e.g. http://127.0.0.1:8080"}
			}
			var b []byte
			var err error
			if tokenFile == "-" {
				b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			} else {
				b, err = os.ReadFile(tokenFile)
			}
			if err != nil {
				return fmt.Errorf("reading the token: %w", err)
			}
			token := strings.TrimSpace(string(b))
			if token == "" {
				return fmt.Errorf("--token-file %s is empty", tokenFile)
			}
			c, err := client.New(endpoint, token, client.WithUserAgent("sless-cli/"+version))
			if err != nil {
				return fmt.Errorf("login failed: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if err := c.EnsureNamespace(ctx); err != nil {
				var ae *apiv1.Error
				if errors.As(err, &ae) && ae.Code == apiv1.CodeUnauthenticated {
					return fmt.Errorf("login failed: the API at %s refused the token: %s (%s); get a valid token and log in again", c.Endpoint(), ae.Message, ae.Code)
				}
				return fmt.Errorf("login failed: checking the token at %s: %w", c.Endpoint(), err)
			}
			p, err := saveConfig(cliConfig{Endpoint: c.Endpoint(), Token: token})
			if err != nil {
				return fmt.Errorf("writing the config: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s (namespace %s); saved to %s\n", c.Endpoint(), c.Namespace(), p)
			return nil
		},
	}
	c.Flags().StringVar(&endpoint, "endpoint", "", "the sless API's base URL, e.g. http://127.0.0.1:8080 (default $"+envEndpoint+")")
	c.Flags().StringVar(&tokenFile, "token-file", "", "file holding the JWT; '-' reads standard input")
	c.MarkFlagRequired("token-file")
	return c
}

// Output formats of -o.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

func addOutputFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "output", "o", outTable, "output format: table, json or yaml")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{outTable, outJSON, outYAML}, cobra.ShellCompDirectiveNoFileComp))
}

func checkOutput(o string) error {
	switch o {
	case outTable, outJSON, outYAML:
		return nil
	}
	return usageError{fmt.Sprintf("-o %q: choose table, json or yaml", o)}
}

// printStructured writes v as indented JSON or as YAML (the wire's field names either way).
func printStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == outYAML {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table writes rows under a header, columns aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// oneLine shortens a message for a table cell.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(termSafe(s)), " ") // table cells show tenant text (status messages)
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// completeNames completes the first argument with names the API lists (nothing when it cannot
// be asked).
func completeNames(list func(context.Context, *client.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return listNames(cmd, list, toComplete)
	}
}

func listNames(cmd *cobra.Command, list func(context.Context, *client.Client) ([]string, error), toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := apiClient(io.Discard)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(helpContext(cmd), 5*time.Second)
	defer cancel()
	names, err := list(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func functionNames(ctx context.Context, c *client.Client) ([]string, error) {
	fs, err := c.ListFunctions(ctx)
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	return names, err
}

func triggerNames(ctx context.Context, c *client.Client) ([]string, error) {
	ts, err := c.ListTriggers(ctx)
	var names []string
	for _, t := range ts {
		names = append(names, t.Name)
	}
	return names, err
}
