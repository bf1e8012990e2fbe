package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
)

// Logs on a single host (issue 18): what the instances print, through GET …/logs, merged, followed,
// readable after scale-down; the build log and the lifecycle events; another tenant sees nothing.
func TestLogsUp(t *testing.T) {
	podman := testenv.NewPodman(t)
	u := startUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "0", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})
	const handler = "import sys\ndef handle(event):\n    print('hello ' + event['path'])\n    print('warned ' + event['path'], file=sys.stderr)\n    return 'ok'\n"
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "talker", Runtime: "python3.11", IdleTimeoutSec: 5}); err != nil {
		t.Fatal(err)
	}
	if f := u.deploy(t, "talker", "python3.11", map[string]string{"handler.py": handler}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("%+v", f.Status)
	}
	call := func(path string) string {
		t.Helper()
		resp, err := http.Get(u.url + "/fn/" + ns + "/talker" + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return resp.Header.Get("X-Request-Id")
	}
	// logs reads a function's log through the API client; status is the answer's status code to
	// a raw GET …/talker/logs?query with token (for what the client would not send).
	logs := func(name string, o client.LogsOptions) []apiv1.LogLine {
		t.Helper()
		var out []apiv1.LogLine
		if err := u.c.Logs(ctx, name, o, func(l apiv1.LogLine) error { out = append(out, l); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	status := func(token, query string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", u.url+"/v1/namespaces/"+ns+"/functions/talker/logs?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	events := func(name string) []apiv1.Event {
		t.Helper()
		evs, err := u.c.ListEvents(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	one, thousand := 1, 1000
	find := func(lines []apiv1.LogLine, stream, sub string) *apiv1.LogLine {
		for i, l := range lines {
			if l.Stream == stream && strings.Contains(l.Line, sub) {
				return &lines[i]
			}
		}
		return nil
	}
	rid := call("/first")

	t.Run("instances' output, joined to invocations by request id", func(t *testing.T) {
		var lines []apiv1.LogLine
		waitFor(t, 5*time.Second, func() bool {
			lines = logs("talker", client.LogsOptions{})
			return find(lines, "stdout", `"request_id": "`+rid+`"`) != nil
		}, "the runtime's line of the request")
		hello, warned, report := find(lines, "stdout", "hello /first"), find(lines, "stderr", "warned /first"), find(lines, "stdout", rid)
		if hello == nil || warned == nil || report == nil {
			t.Fatalf("lines: %+v", lines)
		}
		var r struct {
			Status     int     `json:"status"`
			DurationMS float64 `json:"duration_ms"`
			RequestID  string  `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(report.Line), &r); err != nil || r.Status != 200 || r.RequestID != rid || r.DurationMS <= 0 {
			t.Errorf("the runtime's line per invocation %q: %+v %v", report.Line, r, err)
		}
		inv, err := u.c.ListInvocations(ctx, "talker", 10, time.Time{})
		if err != nil || len(inv) == 0 || inv[0].RequestID != rid {
			t.Errorf("…/invocations does not carry the log's request id %s: %+v %v", rid, inv, err)
		}
		if !strings.HasPrefix(hello.Instance, "sless-") || time.Since(hello.Time) > time.Minute {
			t.Errorf("line %+v", hello)
		}
		if tail := logs("talker", client.LogsOptions{Tail: &one}); len(tail) != 1 {
			t.Errorf("tail=1: %d lines", len(tail))
		}
		if none := logs("talker", client.LogsOptions{Since: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}); len(none) != 0 {
			t.Errorf("since an hour from now: %d lines", len(none))
		}
	})

	t.Run("follow streams new lines until the client goes", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, _ := http.NewRequestWithContext(cctx, "GET", u.url+"/v1/namespaces/"+ns+"/functions/talker/logs?follow=true&tail=0", nil)
		req.Header.Set("Authorization", "Bearer "+u.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		defer resp.Body.Close()
		got := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				got <- sc.Text()
			}
			close(got)
		}()
		call("/second")
		deadline := time.After(10 * time.Second)
		for seen := false; !seen; {
			select {
			case l, ok := <-got:
				if !ok {
					t.Fatal("the stream ended")
				}
				if strings.Contains(l, "first") {
					t.Errorf("tail=0 sent an old line: %s", l)
				}
				seen = strings.Contains(l, "hello /second")
			case <-deadline:
				t.Fatal("no followed line within 10 s")
			}
		}
	})

	t.Run("the build log and the events", func(t *testing.T) {
		build := logs("talker", client.LogsOptions{Source: apiv1.LogSourceBuild})
		text := ""
		for _, l := range build {
			text += l.Line + "\n"
		}
		if len(build) < 4 || !strings.Contains(text, "stored: code") || !strings.Contains(text, "built ") || build[0].Stream != apiv1.StreamBuild {
			t.Errorf("build log:\n%s", text)
		}
		// Events are written behind the lifecycle (a build does not wait for its report).
		var got string
		waitFor(t, 5*time.Second, func() bool {
			var reasons []string
			for _, e := range events("talker") {
				reasons = append(reasons, e.Reason)
			}
			got = strings.Join(reasons, ",")
			return got == "Stored,Building,Pushing,Built,Starting,Ready"
		}, "the events Stored … Ready")
		f, err := u.c.GetFunction(ctx, "talker")
		if err != nil {
			t.Fatal(err)
		}
		b, r := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionBuilt), apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
		if b == nil || r == nil || b.Status != "True" || b.Reason != apiv1.ReasonBuilt || b.Message != f.Status.Image ||
			r.Status != "True" || r.Reason != apiv1.ReasonReady || r.LastTransitionTime.IsZero() {
			t.Errorf("conditions %+v", f.Status.Conditions)
		}
	})

	t.Run("a failed start is an event, a condition and the instance's last lines", func(t *testing.T) {
		const broken = "print('loading broken')\nraise RuntimeError('broken on import')\n"
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "broken", Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		f := u.deploy(t, "broken", "python3.11", map[string]string{"handler.py": broken})
		r := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
		if f.Status.Phase != apiv1.PhaseFailed || r == nil || r.Status != "False" || r.Reason != apiv1.ReasonFailed || !strings.Contains(r.Message, "start failed") {
			t.Fatalf("status %+v", f.Status)
		}
		if b := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionBuilt); b == nil || b.Status != "True" {
			t.Errorf("the build succeeded: %+v", f.Status.Conditions)
		}
		if err := lifecycletest.WroteWire(lifecycletest.StartFailed, f.Status); err != nil {
			t.Error(err)
		}
		var last apiv1.Event
		waitFor(t, 5*time.Second, func() bool {
			if evs := events("broken"); len(evs) > 0 {
				last = evs[len(evs)-1]
			}
			return last.Reason == apiv1.ReasonFailed
		}, "a Failed event")
		if last.Type != apiv1.EventWarning || !strings.Contains(last.Message, "broken on import") {
			t.Errorf("last event %+v", last)
		}
		// The container that failed its start is gone; what it printed is not.
		text := ""
		for _, l := range logs("broken", client.LogsOptions{}) {
			text += l.Line + "\n"
		}
		if !strings.Contains(text, "loading broken") || !strings.Contains(text, "broken on import") {
			t.Errorf("the failed instance's output:\n%s", text)
		}
	})

	t.Run("bad input and another tenant", func(t *testing.T) {
		for q, want := range map[string]int{"tail=10001": 400, "tail=-1": 400, "since=yesterday": 400, "follow=maybe": 400, "source=disk": 400} {
			if code := status(u.token, q); code != want {
				t.Errorf("%s: %d, want %d", q, code, want)
			}
		}
		otherTenant(t, u, "mallory@example.com")
		token, err := auth.IssueHS256(devSecret(t, u), "mallory@example.com", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if code := status(token, "follow=true"); code != 404 {
			t.Errorf("another tenant following the logs: %d, want 404", code)
		}
	})

	t.Run("an instance stopped by scale-down stays readable", func(t *testing.T) {
		waitFor(t, 40*time.Second, func() bool { f, _ := u.c.GetFunction(ctx, "talker"); return f.Status.Replicas == 0 }, "the idle function at zero")
		lines := logs("talker", client.LogsOptions{Tail: &thousand})
		if find(lines, "stdout", "hello /first") == nil || find(lines, "stdout", "hello /second") == nil {
			t.Errorf("after scale-down: %+v", lines)
		}
	})

	// After this real traffic (an upload, a build, calls, a cold start from zero), every family on
	// /metrics has moved, but those this traffic cannot move (and the test that moves them), and
	// Prometheus's linter finds nothing.
	t.Run("every metric family moved", func(t *testing.T) {
		call("/cold") // from zero: a cold start
		// The replica gauges read the status, which follows the start.
		waitFor(t, 5*time.Second, func() bool { f, _ := u.c.GetFunction(ctx, "talker"); return f.Status.Replicas == 1 }, "status.replicas 1")
		code, m := u.Metrics("")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		elsewhere := map[string]string{
			"sless_dependency_cache_hits_total": "TestDependencies", "sless_dependency_installs_total": "TestDependencies",
			"sless_function_held_requests": "a gauge, 0 when idle", "sless_function_in_flight_requests": "a gauge, 0 when idle",
			"sless_async_accepted_total": "TestAsyncInvocationUp",
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(m))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for name, mf := range families {
			if !strings.HasPrefix(name, "sless_") || elsewhere[name] != "" {
				continue
			}
			n++
			moved := false
			for _, s := range mf.GetMetric() {
				moved = moved || s.GetCounter().GetValue() > 0 || s.GetHistogram().GetSampleCount() > 0 || s.GetGauge().GetValue() > 0
			}
			if !moved {
				t.Errorf("%s did not move after real traffic:\n%s", name, grepLines(m, name))
			}
		}
		for _, want := range []string{"sless_builds_total", "sless_build_duration_seconds", "sless_upload_bytes", "sless_function_requests_total",
			"sless_function_request_duration_seconds", "sless_function_cold_starts_total", "sless_function_cold_start_duration_seconds",
			"sless_function_replicas", "sless_function_desired_replicas", "sless_http_requests_total"} {
			if families[want] == nil {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		t.Logf("%d sless_ families moved", n)
		problems, err := promlint.New(strings.NewReader(m)).Lint()
		if err != nil || len(problems) != 0 {
			t.Errorf("promlint: %v %+v", err, problems)
		}
	})
}
