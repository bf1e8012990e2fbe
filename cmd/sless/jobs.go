package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

func jobsCmd() *cobra.Command {
	c := group("jobs", "Run a function once with an event")
	c.Aliases = []string{"job"}
	c.AddCommand(jobsRunCmd())
	return c
}

func jobsRunCmd() *cobra.Command {
	var function, event string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "run NAME --function F --event JSON|@FILE",
		Short: "Create or re-run a job, wait until it finishes and print its result",
		Long: `Run starts job NAME: it creates the job (run 1) or, when it exists, raises its run_id so it runs
again with --event. It waits until the run finishes and prints the result (the function's return
value); a failed run prints the platform's message and exits non-zero. A job's function is fixed
once the job exists: --function may be left out then.`,
		Example: `  sless jobs run nightly --function report --event '{"day":"2026-11-25"}'`,
		Args:    cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(func(ctx context.Context, c *client.Client) ([]string, error) {
			js, err := c.ListJobs(ctx)
			var names []string
			for _, j := range js {
				names = append(names, j.Name)
			}
			return names, err
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			ev, err := readData(cmd, event, "--event")
			if err != nil {
				return err
			}
			if !json.Valid(ev) {
				return usageError{fmt.Sprintf("--event %s is not JSON", event)}
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			j, err := startRun(ctx, c, name, function, string(ev))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "job %s: run %d of function %s started\n", name, j.RunID, j.FunctionRef)
			j, err = waitRun(ctx, c, name, j.RunID, wait)
			if err != nil {
				return err
			}
			if j.Status.Phase == apiv1.JobFailed {
				return fmt.Errorf("job %s run %d failed: %s", name, j.RunID, termSafe(j.Status.Message))
			}
			fmt.Fprintln(cmd.OutOrStdout(), termSafe(j.Status.Message))
			return nil
		},
	}
	c.Flags().StringVar(&function, "function", "", "the function the job runs (required to create the job)")
	c.Flags().StringVar(&event, "event", "{}", "the event: JSON text, or @FILE (@- reads standard input)")
	c.Flags().DurationVar(&wait, "wait-timeout", 10*time.Minute, "how long to wait for the run to finish")
	c.RegisterFlagCompletionFunc("function", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return listNames(cmd, functionNames, toComplete)
	})
	return c
}

// startRun creates job name with run 1, or raises its run_id past every earlier run.
func startRun(ctx context.Context, c *client.Client, name, function, event string) (*apiv1.Job, error) {
	for attempt := 0; ; attempt++ {
		cur, err := c.GetJob(ctx, name)
		if client.IsNotFound(err) {
			if function == "" {
				return nil, usageError{fmt.Sprintf("--function is required: job %s does not exist yet", name)}
			}
			j, err := c.CreateJob(ctx, apiv1.Job{Name: name, FunctionRef: function, EventJSON: event, RunID: 1})
			if client.IsAlreadyExists(err) && attempt == 0 {
				continue // created meanwhile: run it again instead
			}
			return j, err
		}
		if err != nil {
			return nil, err
		}
		if function == "" {
			function = cur.FunctionRef
		}
		return c.PutJob(ctx, apiv1.Job{Name: name, FunctionRef: function, EventJSON: event, RunID: max(cur.RunID, cur.Status.LastRunID) + 1})
	}
}

// waitRun polls until run runID of the job has finished.
func waitRun(ctx context.Context, c *client.Client, name string, runID int64, timeout time.Duration) (*apiv1.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		j, err := c.GetJob(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("job %s run %d: gave up waiting after %s", name, runID, timeout)
			}
			return nil, err
		}
		if j.Status.LastRunID >= runID && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed) {
			if j.Status.LastRunID > runID {
				return nil, fmt.Errorf("job %s: run %d was overtaken by run %d (started by someone else)", name, runID, j.Status.LastRunID)
			}
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s run %d is still %s after %s", name, runID, j.Status.Phase, timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func triggersCmd() *cobra.Command {
	c := group("triggers", "List triggers; enable or disable them")
	c.Aliases = []string{"trigger"}
	var out string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your triggers",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ts, err := c.ListTriggers(cmd.Context())
			if err != nil {
				return err
			}
			if out != outTable {
				return printStructured(cmd.OutOrStdout(), out, apiv1.List[apiv1.Trigger]{Items: orEmpty(ts)})
			}
			rows := make([][]string, 0, len(ts))
			for _, t := range ts {
				source, state := orDash(t.Schedule), orDash(t.Status.URL)
				if t.RabbitMQ != nil {
					source = "queue " + oneLine(t.RabbitMQ.Queue, 60)
					state = rabbitMQState(t.Status)
				}
				rows = append(rows, []string{t.Name, string(t.Type), t.FunctionRef, source,
					strconv.FormatBool(t.IsEnabled()), strconv.FormatBool(t.Status.Active), state})
			}
			return table(cmd.OutOrStdout(), []string{"NAME", "TYPE", "FUNCTION", "SOURCE", "ENABLED", "ACTIVE", "URL/STATE"}, rows)
		},
	}
	addOutputFlag(ls, &out)
	c.AddCommand(ls, setTriggerCmd("enable", true), setTriggerCmd("disable", false))
	return c
}

// rabbitMQState is a rabbitmq trigger's consumer for a table cell: connected with its counts, or
// why not (the last error is the broker's or the platform's text: made safe for a terminal).
func rabbitMQState(s apiv1.TriggerStatus) string {
	if s.Connected {
		return fmt.Sprintf("connected, %d delivered, %d dead-lettered, %d in flight", s.DeliveredTotal, s.DeadLetteredTotal, s.InFlight)
	}
	if s.LastError != "" {
		return "not connected: " + oneLine(s.LastError, 80)
	}
	return "not connected"
}

func setTriggerCmd(verb string, enabled bool) *cobra.Command {
	short := "Enable a trigger: its function serves (http) or runs on schedule (cron) again"
	if !enabled {
		short = "Disable a trigger: an http trigger's function scales to zero and answers 503 once none is enabled; a cron trigger stops running"
	}
	return &cobra.Command{
		Use:               verb + " NAME",
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(triggerNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if _, err := c.SetTriggerEnabled(cmd.Context(), args[0], enabled); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "trigger %s %sd\n", args[0], verb)
			return nil
		},
	}
}
