package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

func deadLettersCmd() *cobra.Command {
	c := group("dead-letters", "List a function's failed asynchronous invocations; send them again")
	c.Aliases = []string{"dlq"}
	var out string
	var limit int
	ls := &cobra.Command{
		Use:               "ls FUNCTION",
		Aliases:           []string{"list"},
		Short:             "List a function's dead-lettered asynchronous invocations, newest first, with their last error",
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
			items, err := c.ListDeadLetters(cmd.Context(), args[0], limit)
			if err != nil {
				return err
			}
			if out != outTable {
				return printStructured(cmd.OutOrStdout(), out, apiv1.List[apiv1.AsyncInvocation]{Items: orEmpty(items)})
			}
			rows := make([][]string, 0, len(items))
			for _, it := range items {
				rows = append(rows, []string{it.ID, it.Created.Local().Format(time.DateTime), strconv.Itoa(len(it.Attempts)), oneLine(it.Error, 100)})
			}
			return table(cmd.OutOrStdout(), []string{"ID", "CREATED", "ATTEMPTS", "ERROR"}, rows)
		},
	}
	addOutputFlag(ls, &out)
	ls.Flags().IntVar(&limit, "limit", 0, "list at most this many (1–1000; default 100)")
	redrive := &cobra.Command{
		Use:   "redrive FUNCTION ID...",
		Short: "Queue dead-lettered asynchronous invocations again: retried from the first attempt, their max age counted from now",
		Example: `  sless dead-letters redrive resize 0190c4d2a6b1f3e4d5c6b7a8f9e0d1c2
  sless dead-letters ls resize -o json | jq -r '.items[].id' | xargs sless dead-letters redrive resize`,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completeNames(functionNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			for _, id := range args[1:] {
				if _, err := c.Redrive(cmd.Context(), args[0], id); err != nil {
					return fmt.Errorf("redriving %s: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s queued again\n", id)
			}
			return nil
		},
	}
	c.AddCommand(ls, redrive)
	return c
}

// waitAsync polls an asynchronous invocation until it is done and prints how it went; a dead
// letter exits non-zero.
func waitAsync(ctx context.Context, c *client.Client, name, id string, print func(string, ...any)) error {
	delay := 100 * time.Millisecond
	for {
		inv, err := c.GetAsync(ctx, name, id)
		if err != nil {
			return err
		}
		if inv.State.Done() {
			n := len(inv.Attempts)
			if inv.State == apiv1.AsyncSucceeded {
				print("%s succeeded after %d attempt(s); status %d\n", id, n, inv.Attempts[n-1].Status)
				return nil
			}
			return fmt.Errorf("%s dead-lettered after %d attempt(s): %s", id, n, termSafe(inv.Error))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still %s: %w", id, inv.State, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}
