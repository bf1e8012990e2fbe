package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

func secretCmd() *cobra.Command {
	c := group("secret", "Write, list and delete secrets (write-only values for functions)")
	c.Aliases = []string{"secrets"}
	c.AddCommand(secretSetCmd(), secretListCmd(), secretRemoveCmd())
	return c
}

func secretSetCmd() *cobra.Command {
	var fromFile []string
	c := &cobra.Command{
		Use:   "set NAME [KEY=VALUE|KEY=-]... [--from-file KEY=PATH]...",
		Short: "Create or replace a secret whole",
		Long: fmt.Sprintf(`Set writes secret NAME with the keys given, replacing all it held: a key not given is
removed. KEY=VALUE takes the value from the command line (where the shell's history and other
processes can see it); KEY=- reads it from standard input (one trailing newline removed);
--from-file KEY=PATH reads it from a file, byte for byte. Keys are environment variable names
(letters, digits and '_', not starting with a digit). A value is at most %d bytes, a secret %d.

Values are never printed, and the API never answers them: 'sless secret ls' shows names, keys
and versions. Functions use a secret with 'sless fn deploy --secret-env NAME=SECRET/KEY' or
'--secret-file %sDIR=SECRET'; a new value restarts them, without a rebuild.`, apiv1.MaxSecretValueBytes, apiv1.MaxSecretBytes, apiv1.SecretFilesRoot),
		Example: `  sless secret set db url=postgres://db:5432/app user=app
  printf %s "$DB_PASSWORD" | sless secret set db password=-
  sless secret set tls --from-file cert=tls.crt --from-file key=tls.key`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeNames(secretNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := apiv1.ValidName("secret", name); err != nil {
				return usageError{err.(*apiv1.Error).Message}
			}
			data, err := secretData(cmd.InOrStdin(), args[1:], fromFile)
			if err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := c.EnsureNamespace(ctx); err != nil {
				return fmt.Errorf("ensuring namespace %s: %w", c.Namespace(), err)
			}
			s, err := c.PutSecret(ctx, name, data)
			if err != nil {
				return fmt.Errorf("writing secret %s: %w", name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "secret %s written: version %d, keys %s\n", s.Name, s.Version, strings.Join(s.Keys, ", "))
			return nil
		},
	}
	c.Flags().StringArrayVar(&fromFile, "from-file", nil, "a value read from a file, KEY=PATH (repeat the flag for more)")
	return c
}

// secretData reads the values of `secret set` and checks them as the API will, so a mistake is
// told before anything is sent; errors name keys and files, never a value.
func secretData(stdin io.Reader, pairs, files []string) (map[string]string, error) {
	if len(pairs)+len(files) == 0 {
		return nil, usageError{"give at least one KEY=VALUE, KEY=- or --from-file KEY=PATH"}
	}
	data := map[string]string{}
	add := func(k, v string) error {
		if _, dup := data[k]; dup {
			return usageError{fmt.Sprintf("key %s is given twice", k)}
		}
		data[k] = v
		return nil
	}
	stdinUsed := false
	for i, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			// Not the argument itself: it may be a value typed without its key.
			return nil, usageError{fmt.Sprintf("argument %d after the secret's name must be KEY=VALUE, KEY=- or --from-file KEY=PATH", i+1)}
		}
		if v == "-" {
			if stdinUsed {
				return nil, usageError{fmt.Sprintf("%s=-: standard input is read for one key only", k)}
			}
			stdinUsed = true
			b, err := readValue(stdin, "standard input")
			if err != nil {
				return nil, fmt.Errorf("key %s: %w", k, err)
			}
			v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
		if err := add(k, v); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		k, path, ok := strings.Cut(f, "=")
		if !ok || k == "" || path == "" {
			return nil, usageError{fmt.Sprintf("--from-file %q must be KEY=PATH", f)}
		}
		if st, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", k, err)
		} else if st.IsDir() {
			return nil, fmt.Errorf("--from-file %s: %s is a directory; give a file", k, path)
		} else if st.Size() > apiv1.MaxSecretValueBytes {
			return nil, fmt.Errorf("--from-file %s: %s is %d bytes; a secret value is at most %d bytes (%s)", k, path, st.Size(), apiv1.MaxSecretValueBytes, humanBytes(apiv1.MaxSecretValueBytes))
		}
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", k, err)
		}
		b, err := readValue(fh, path) // the size again: a pipe or a growing file
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", k, err)
		}
		if err := add(k, string(b)); err != nil {
			return nil, err
		}
	}
	if err := apiv1.ValidSecretData(data); err != nil {
		var ae *apiv1.Error
		if errors.As(err, &ae) {
			return nil, usageError{ae.Message}
		}
		return nil, err
	}
	return data, nil
}

// readValue reads at most one value's worth from r.
func readValue(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, apiv1.MaxSecretValueBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if len(b) > apiv1.MaxSecretValueBytes {
		return nil, fmt.Errorf("%s holds more than %d bytes; a secret value is at most that", what, apiv1.MaxSecretValueBytes)
	}
	return b, nil
}

func secretListCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your secrets: names, keys and versions (never a value)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ss, err := c.ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			if out != outTable {
				return printStructured(cmd.OutOrStdout(), out, apiv1.List[apiv1.Secret]{Items: orEmpty(ss)})
			}
			rows := make([][]string, 0, len(ss))
			for _, s := range ss {
				updated := "-"
				if s.UpdatedAt != nil {
					updated = s.UpdatedAt.Local().Format(time.RFC3339)
				}
				rows = append(rows, []string{s.Name, strings.Join(s.Keys, ","), fmt.Sprint(s.Version), updated})
			}
			return table(cmd.OutOrStdout(), []string{"NAME", "KEYS", "VERSION", "UPDATED"}, rows)
		},
	}
	addOutputFlag(c, &out)
	return c
}

func secretRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete secrets (refused while a function uses one)",
		Args:    cobra.MinimumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return listNames(cmd, secretNames, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := c.DeleteSecret(cmd.Context(), name); err != nil {
					errs = append(errs, fmt.Errorf("deleting secret %s: %w", name, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "secret %s deleted\n", name)
			}
			return errors.Join(errs...)
		},
	}
}

func secretNames(ctx context.Context, c *client.Client) ([]string, error) {
	ss, err := c.ListSecrets(ctx)
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	return names, err
}
