package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

// Output formats of the streamed commands (logs, events): a readable line, or the API's NDJSON.
const outText = "text"

func addStreamOutputFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "output", "o", outText, "output format: text, or json (one JSON object a line, as the API sends them)")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{outText, outJSON}, cobra.ShellCompDirectiveNoFileComp))
}

func checkStreamOutput(o string) error {
	if o != outText && o != outJSON {
		return usageError{fmt.Sprintf("-o %q: choose text or json", o)}
	}
	return nil
}

// checkSince refuses a --since the API would refuse, as a usage error.
func checkSince(since string) error {
	if since == "" {
		return nil
	}
	if _, err := apiv1.ParseSince(since, time.Now()); err != nil {
		return usageError{"--since: " + err.Error()}
	}
	return nil
}

func logsCmd() *cobra.Command {
	var follow, build bool
	var since, out string
	var tail int
	c := &cobra.Command{
		Use:   "logs NAME [-f] [--since 5m] [--tail N] [--build]",
		Short: "Print a function's logs, or its last build's",
		Long: `Logs prints what the function's instances wrote (those running, and those stopped within the
last hour), oldest first, merged by time: TIME INSTANCE [stderr] LINE. With --build it prints the
last build's log instead: its stages and the dependency install's output.
-f keeps following: new lines, also of instances that start meanwhile, until Ctrl-C.
-o json prints each line as the API's JSON object (time, instance, stream, line), one a line.`,
		Example: `  sless logs hello
  sless logs hello -f --tail 0
  sless logs hello --since 10m --tail 1000
  sless logs hello --build`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(functionNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkStreamOutput(out); err != nil {
				return err
			}
			if err := checkSince(since); err != nil {
				return err
			}
			o := client.LogsOptions{Follow: follow, Since: since}
			if cmd.Flags().Changed("tail") {
				if tail < 0 || tail > apiv1.MaxLogTail {
					return usageError{fmt.Sprintf("--tail %d: give 0 to %d", tail, apiv1.MaxLogTail)}
				}
				o.Tail = &tail
			}
			if build {
				o.Source = apiv1.LogSourceBuild
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			return c.Logs(cmd.Context(), args[0], o, func(l apiv1.LogLine) error {
				if out == outJSON {
					return printJSONLine(w, l)
				}
				_, err := io.WriteString(w, formatLogLine(args[0], l))
				return err
			})
		},
	}
	fl := c.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	fl.StringVar(&since, "since", "", "only lines since this RFC 3339 time or this long ago (5m, 1h30m)")
	fl.IntVar(&tail, "tail", apiv1.DefaultLogTail, fmt.Sprintf("print the last N lines first (0 to %d)", apiv1.MaxLogTail))
	fl.BoolVar(&build, "build", false, "the last build's log instead of the instances'")
	addStreamOutputFlag(c, &out)
	return c
}

func fnEventsCmd() *cobra.Command {
	var follow bool
	var since, out string
	c := &cobra.Command{
		Use:   "events NAME [-f] [--since 5m]",
		Short: "Print a function's lifecycle events: its builds' and starts' stages",
		Long: `Events prints the function's lifecycle, oldest first: TIME REASON MESSAGE, where REASON is the stage
(Stored, InstallingDependencies, Building, Pushing, Built, Starting, Ready, or Failed with why).
-f keeps following until Ctrl-C. -o json prints the API's JSON objects, one a line.`,
		Example: `  sless fn events hello
  sless fn events hello -f`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(functionNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkStreamOutput(out); err != nil {
				return err
			}
			if err := checkSince(since); err != nil {
				return err
			}
			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			return c.Events(cmd.Context(), args[0], follow, since, func(e apiv1.Event) error {
				if out == outJSON {
					return printJSONLine(w, e)
				}
				_, err := io.WriteString(w, formatEvent(e))
				return err
			})
		},
	}
	fl := c.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	fl.StringVar(&since, "since", "", "only events since this RFC 3339 time or this long ago (5m, 1h30m)")
	addStreamOutputFlag(c, &out)
	return c
}

// printJSONLine writes v as one compact JSON line (NDJSON, like the API). encoding/json escapes
// C0 controls but leaves DEL and the C1 controls (U+0080–U+009F) raw, which a terminal may act on
// (U+009B is CSI): they are escaped too, the JSON meaning the same.
func printJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var out []byte
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == 0x7f:
			out = fmt.Appendf(out, `\u%04x`, b[i])
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, b[i+1])
			i++
		default:
			out = append(out, b[i])
		}
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

// logTime is how the text forms show a time: UTC to the millisecond, one width for every line.
func logTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// formatLogLine is `sless logs`' text line: TIME INSTANCE LINE, "stderr" before the line when the
// platform kept the stream apart; a build log's lines need no instance. The instance is shown
// without what every instance of function name repeats (-o json has it whole). What tenant code
// wrote is shown without terminal controls (termSafe); -o json has it as written, JSON-escaped.
func formatLogLine(name string, l apiv1.LogLine) string {
	var b strings.Builder
	b.WriteString(logTime(l.Time))
	if l.Stream != apiv1.StreamBuild {
		b.WriteString(" " + termSafe(shortInstance(name, l.Instance)))
	}
	if l.Stream == apiv1.StreamStderr {
		b.WriteString(" stderr")
	}
	b.WriteString(" " + termSafe(l.Line) + "\n")
	return b.String()
}

// formatEvent is `sless fn events`' text line: TIME REASON MESSAGE (a warning marked). A message
// may quote an install's output (tenant code): it is shown without terminal controls.
func formatEvent(e apiv1.Event) string {
	msg := e.Message
	if e.Type == apiv1.EventWarning && e.Reason != apiv1.ReasonFailed {
		msg = "warning: " + msg
	}
	if e.CodeSHA256 != "" {
		msg += " (code " + e.CodeSHA256[:min(12, len(e.CodeSHA256))] + ")"
	}
	return fmt.Sprintf("%s %-22s %s\n", logTime(e.Time), termSafe(e.Reason), termSafe(strings.TrimSpace(msg)))
}

// shortInstance drops the part of an instance's name up to the function's name: a pod
// "hello-5d8f7c9b4-x2x7z" is "5d8f7c9b4-x2x7z", a local container
// "sless-sless-<ns>-hello-<version>-<id>" is "<version>-<id>".
func shortInstance(name, inst string) string {
	if rest, ok := strings.CutPrefix(inst, name+"-"); ok && rest != "" {
		return rest
	}
	if i := strings.LastIndex(inst, "-"+name+"-"); i >= 0 && i+len(name)+2 < len(inst) {
		return inst[i+len(name)+2:]
	}
	return inst
}
