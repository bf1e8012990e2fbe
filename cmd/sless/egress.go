package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
)

func egressCmd() *cobra.Command {
	c := group("egress", "What the namespace's functions, jobs and cron runs may reach")
	c.AddCommand(egressGetCmd(), egressSetCmd())
	return c
}

func egressGetCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "get",
		Short: "Show the namespace's egress rule and what the install permits it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			cl, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			eg, err := cl.GetEgress(cmd.Context())
			if err != nil {
				return err
			}
			return printEgress(cmd.OutOrStdout(), output, eg)
		},
	}
	addOutputFlag(c, &output)
	return c
}

func egressSetCmd() *cobra.Command {
	var output, mode string
	var allow []string
	c := &cobra.Command{
		Use:   "set --mode internet|none [--allow CIDR:PORT]…",
		Short: "Narrow what the namespace's functions, jobs and cron runs may reach",
		Long: `Set replaces the namespace's egress rule: --mode internet (the outside: never the platform, the
cluster, private, link-local or metadata ranges) or none (DNS and the allowed destinations only),
and --allow, destinations beyond the mode (CIDR:PORT, CIDR:* or a CIDR), each within one the
install permits the namespace. A rule may narrow what the install permits, never widen it: the
platform refuses the entry that would. Without --allow, no destination beyond the mode.`,
		Example: `  sless egress set --mode none --allow 10.0.5.7/32:5432
  sless egress set --mode internet`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			rule := apiv1.EgressRule{Mode: apiv1.EgressMode(mode), Allow: []string{}}
			for _, a := range allow {
				rule.Allow = append(rule.Allow, strings.TrimSpace(a))
			}
			// The platform's own rules, before anything is sent.
			if _, _, err := apiv1.ParseEgressRule(rule); err != nil {
				return usageError{err.Error()}
			}
			cl, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			eg, err := cl.SetEgress(cmd.Context(), rule)
			if err != nil {
				return err
			}
			return printEgress(cmd.OutOrStdout(), output, eg)
		},
	}
	c.Flags().StringVar(&mode, "mode", "", "internet or none")
	c.Flags().StringSliceVar(&allow, "allow", nil, "a destination beyond the mode: CIDR:PORT, CIDR:* or a CIDR (repeatable or comma-separated)")
	c.MarkFlagRequired("mode")
	c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]cobra.Completion{string(apiv1.EgressInternet), string(apiv1.EgressNone)}, cobra.ShellCompDirectiveNoFileComp))
	addOutputFlag(c, &output)
	return c
}

func printEgress(w io.Writer, output string, eg *apiv1.Egress) error {
	if output != outTable {
		return printStructured(w, output, eg)
	}
	list := func(l []string) string { return orDash(strings.Join(l, ", ")) }
	err := table(w, []string{"", "MODE", "ALLOW"}, [][]string{
		{"namespace", string(eg.Mode), list(eg.Allow)},
		{"install permits", string(eg.Install.Mode), list(eg.Install.Allow)},
	})
	if err == nil && eg.Note != "" {
		_, err = fmt.Fprintf(w, "note: %s\n", eg.Note)
	}
	return err
}
