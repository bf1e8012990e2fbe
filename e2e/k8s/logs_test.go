package k8s_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/runspec"
)

// Function logs and events on the real cluster: a Python handler's print and the runtime's
// per-request line (with the request's X-Request-Id) come back from GET …/logs; a followed log
// gets a later invocation's line, and the server ends the stream when the client goes; the build
// log and the Ready event are there; after the function scales to zero its stopped pods' lines
// still are; another tenant gets 404, bad parameters 400.
func TestLogs(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("logs"))
	ctx := context.Background()
	ns := c.Namespace()
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "logger", Runtime: "python3.11", IdleTimeoutSec: 15}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "logger", "python3.11", map[string]string{"handler.py": "def handle(event):\n" +
		"    m = (event.get('query') or {}).get('m', ['none'])[0]\n" +
		"    print('marker ' + m)\n" +
		"    return 'ok ' + m\n"})

	invoke := func(marker, rid string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, f.Status.URL+"?m="+marker, nil)
		req.Header.Set("X-Request-Id", rid)
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "ok "+marker {
			t.Fatalf("invoking: %d %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Request-Id"); got != rid {
			t.Errorf("X-Request-Id %q, sent %q", got, rid)
		}
	}
	logs := func(o apiclient.LogsOptions) []apiv1.LogLine {
		t.Helper()
		var out []apiv1.LogLine
		if err := c.Logs(ctx, "logger", o, func(l apiv1.LogLine) error { out = append(out, l); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// find is the handler's line for marker and the runtime's line for request rid.
	find := func(lines []apiv1.LogLine, marker, rid string) (printed, request *apiv1.LogLine) {
		for i, l := range lines {
			if l.Line == "marker "+marker {
				printed = &lines[i]
			}
			var r struct {
				RequestID string `json:"request_id"`
			}
			if json.Unmarshal([]byte(l.Line), &r) == nil && r.RequestID == rid {
				request = &lines[i]
			}
		}
		return printed, request
	}

	marker1, rid1 := "first-"+runID, "e2e-logs-"+runID+"-1"
	invoke(marker1, rid1)
	var printed, request *apiv1.LogLine
	waitFor(t, "the handler's and the runtime's lines in GET …/logs", time.Minute, func() bool {
		printed, request = find(logs(apiclient.LogsOptions{}), marker1, rid1)
		return printed != nil && request != nil
	})
	if !strings.HasPrefix(printed.Instance, "logger-") || printed.Stream != apiv1.StreamOutput || time.Since(printed.Time) > 5*time.Minute {
		t.Errorf("the handler's line: %+v", printed)
	}
	for _, want := range []string{`"method": "GET"`, `"path": "/"`, `"status": 200`, `"duration_ms"`} {
		if !strings.Contains(request.Line, want) {
			t.Errorf("the runtime's request line lacks %s: %s", want, request.Line)
		}
	}
	if invs, err := c.Invocations(ctx, "logger"); err != nil || len(invs) == 0 || invs[0].RequestID != rid1 {
		t.Errorf("the invocation record of request %s: %+v %v", rid1, invs, err)
	}

	t.Run("follow", func(t *testing.T) {
		apiPods := names(pods(t, "sless-api"))
		ended := func() float64 {
			var n float64
			for _, p := range apiPods {
				n += podMetricOf(t, p, "sless_http_requests_total", `/logs"`)
			}
			return n
		}
		before := ended()
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		got := make(chan apiv1.LogLine, 100)
		done := make(chan error, 1)
		zero := 0
		go func() {
			done <- c.Logs(fctx, "logger", apiclient.LogsOptions{Follow: true, Tail: &zero}, func(l apiv1.LogLine) error {
				got <- l
				return nil
			})
		}()
		time.Sleep(2 * time.Second) // the stream is open (its pods' reads started)
		marker2 := "second-" + runID
		invoke(marker2, "e2e-logs-"+runID+"-2")
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case l := <-got:
				if l.Line == "marker "+marker1 {
					t.Errorf("tail=0 sent an earlier line: %+v", l)
				}
				if l.Line == "marker "+marker2 {
					break wait
				}
			case err := <-done:
				t.Fatalf("the followed stream ended: %v", err)
			case <-deadline:
				t.Fatal("the followed log did not get the later invocation's line within 30 s")
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the followed stream: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the client did not return 5 s after it closed the stream")
		}
		// The server counts a request when its handler returns: the stream ended there too.
		waitFor(t, "the API to end the followed stream", 10*time.Second, func() bool { return ended() >= before+1 })
	})

	t.Run("build log and events", func(t *testing.T) {
		b := logs(apiclient.LogsOptions{Source: apiv1.LogSourceBuild})
		if len(b) == 0 {
			t.Fatal("source=build is empty after a build")
		}
		if b[0].Stream != apiv1.StreamBuild || !strings.Contains(b[len(b)-1].Line, "built") {
			t.Errorf("the build log: first %+v, last %+v", b[0], b[len(b)-1])
		}
		evs, err := c.ListEvents(ctx, "logger")
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, e := range evs {
			reasons = append(reasons, e.Reason)
		}
		for _, want := range []string{apiv1.ReasonBuilt, apiv1.ReasonStarting, apiv1.ReasonReady} {
			if !strings.Contains(" "+strings.Join(reasons, " ")+" ", " "+want+" ") {
				t.Errorf("events %v lack %s", reasons, want)
			}
		}
		f, err := c.GetFunction(ctx, "logger")
		if err != nil {
			t.Fatal(err)
		}
		built, ready := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionBuilt), apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
		if built == nil || ready == nil || built.Status != "True" || built.Reason != apiv1.ReasonBuilt || ready.Status != "True" || ready.Reason != apiv1.ReasonReady {
			t.Errorf("conditions %+v", f.Status.Conditions)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		tenant(t, subject("logs-other"))
		get := func(tok, query string) int {
			req, _ := http.NewRequest(http.MethodGet, cluster.Endpoint+"/v1/namespaces/"+ns+"/functions/logger/logs"+query, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := httpc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		mine := token(t, subject("logs"))
		for _, tc := range []struct {
			tok, query string
			want       int
		}{
			{token(t, subject("logs-other")), "", 404},
			{mine, "?tail=10001", 400},
			{mine, "?since=bogus", 400},
			{mine, "?tail=1", 200},
		} {
			if got := get(tc.tok, tc.query); got != tc.want {
				t.Errorf("GET …/logs%s: %d, want %d", tc.query, got, tc.want)
			}
		}
	})

	t.Run("after scale to zero", func(t *testing.T) {
		waitFor(t, "no pod left after the idle timeout", 3*time.Minute, func() bool {
			var l corev1.PodList
			err := cluster.Kube.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels(runspec.Labels("logger", runspec.RoleFunction)))
			return err == nil && len(l.Items) == 0
		})
		waitFor(t, "the stopped pods' lines", 30*time.Second, func() bool {
			p, r := find(logs(apiclient.LogsOptions{}), marker1, rid1)
			return p != nil && r != nil && p.Instance == printed.Instance
		})
		if p, _ := find(logs(apiclient.LogsOptions{Since: "10m"}), "second-"+runID, ""); p == nil {
			t.Error("the later invocation's line is not kept")
		}
	})
}
