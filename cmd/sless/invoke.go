package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sless-dev/sless/api/apiv1"
)

func invokeCmd() *cobra.Command {
	var path, method, data string
	var headers []string
	var timeout time.Duration
	var async, wait bool
	c := &cobra.Command{
		Use:   "invoke NAME [--path P] [-X METHOD] [-d JSON|@FILE]",
		Short: "Call a function through its URL and print the answer's body",
		Long: `Invoke calls the function at its URL (status.url, /fn/<namespace>/<name>) with --path (path and
query) appended and prints the body of the answer. The method is GET, or POST with -d; -d sends
JSON (Content-Type application/json): the text itself, or @FILE (@- is standard input).
A non-2xx answer exits non-zero (its body is printed too). The function's URL is public: the token
is used only to look the function up, never sent to it.

--async sends the request as an asynchronous invocation (X-Sless-Invocation-Type: Event; the
function must enable async): it is stored and answered 202 with its id at once, and the platform
calls the function, retrying failures; --wait then follows it until it succeeds or is
dead-lettered (see sless dead-letters).`,
		Example: `  sless invoke hello
  sless invoke hello --path '/items/7?verbose=1'
  sless invoke hello -d '{"name":"sless"}'
  sless invoke hello -X PUT -d @event.json
  sless invoke resize --async -d '{"image":"a.png"}' --wait`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(functionNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			var body []byte
			hasBody := cmd.Flags().Changed("data")
			if hasBody {
				var err error
				if body, err = readData(cmd, data, "-d"); err != nil {
					return err
				}
			}
			if method == "" {
				method = http.MethodGet
				if hasBody {
					method = http.MethodPost
				}
			}
			method = strings.ToUpper(method)
			hdr := http.Header{}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(k) == "" {
					return usageError{fmt.Sprintf("-H %q must be 'Name: value'", h)}
				}
				hdr.Add(textproto.TrimString(k), textproto.TrimString(v))
			}
			if hasBody && hdr.Get("Content-Type") == "" {
				hdr.Set("Content-Type", "application/json")
			}
			if wait && !async {
				return usageError{"--wait follows an asynchronous invocation: give --async too"}
			}
			if async {
				hdr.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
			}

			c, err := apiClient(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			f, err := c.GetFunction(cmd.Context(), name)
			if err != nil {
				return err
			}
			u := f.Status.URL
			if u == "" {
				u = c.FunctionURL(name)
			}
			if path != "" && !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "?") {
				path = "/" + path
			}
			u = strings.TrimRight(u, "/") + path
			var rd io.Reader
			if hasBody {
				rd = bytes.NewReader(body)
			}
			req, err := http.NewRequestWithContext(cmd.Context(), method, u, rd)
			if err != nil {
				return usageError{fmt.Sprintf("--path %q: %v", path, err)}
			}
			req.Header = hdr
			req.Header.Set("User-Agent", "sless-cli/"+version)
			resp, err := (&http.Client{Timeout: timeout}).Do(req)
			if err != nil {
				return fmt.Errorf("%s %s: %w", method, u, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				cmd.OutOrStdout().Write(b)
				msg := fmt.Sprintf("%s %s answered %s", method, u, resp.Status)
				var env apiv1.ErrorBody
				if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
					msg += fmt.Sprintf(": %s (%s)", env.Error.Message, env.Error.Code)
				}
				return fmt.Errorf("%s", msg)
			}
			if async {
				var acc apiv1.AsyncAccepted
				if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&acc); err != nil || acc.ID == "" {
					return fmt.Errorf("%s %s answered %s, not an asynchronous invocation's id: %v", method, u, resp.Status, err)
				}
				out := func(format string, args ...any) { fmt.Fprintf(cmd.OutOrStdout(), format, args...) }
				out("%s accepted (%s)\n", acc.ID, acc.StatusURL)
				if !wait {
					return nil
				}
				return waitAsync(cmd.Context(), c, name, acc.ID, out)
			}
			if _, err := io.Copy(cmd.OutOrStdout(), resp.Body); err != nil {
				return fmt.Errorf("reading the answer: %w", err)
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&path, "path", "", "path and query appended to the function's URL, e.g. /items?id=7")
	fl.StringVarP(&method, "request", "X", "", "HTTP method (default GET, or POST with -d)")
	fl.StringVarP(&data, "data", "d", "", "request body: JSON text, or @FILE (@- reads standard input)")
	fl.StringArrayVarP(&headers, "header", "H", nil, "an extra request header 'Name: value' (repeat the flag for more)")
	fl.DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	fl.BoolVar(&async, "async", false, "invoke asynchronously: print the invocation's id once it is stored (202)")
	fl.BoolVar(&wait, "wait", false, "with --async, wait until the invocation succeeded or was dead-lettered")
	return c
}

// readData is a flag's value, or @FILE's contents (@- is standard input).
func readData(cmd *cobra.Command, v, flag string) ([]byte, error) {
	file, ok := strings.CutPrefix(v, "@")
	if !ok {
		return []byte(v), nil
	}
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, v, err)
	}
	return b, nil
}
