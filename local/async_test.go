package local_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// asyncHandler fails on "fail" (500: retried, then dead-lettered) and refuses "bad" with its own
// 422 (dead-lettered at once); anything else is answered with the invocation's id.
const asyncHandler = `def handle(event):
    body = event["body"]
    if body == "fail":
        raise RuntimeError("poison")
    if body == "bad":
        return {"statusCode": 422, "body": "no"}
    return {"id": event["headers"].get("x-sless-event-message-id")}
`

// Asynchronous invocation on a real sless up: 202 at once with an id; every invocation delivered
// through /fn/ to a real function (at zero first: the first one wakes it) and recorded with source
// async; a failing one retried then dead-lettered, the function's 4xx dead-lettered at once, both
// listed and redriven; invocations accepted while the function cannot serve (disabled) wait, and
// survive a restart of sless up, then are delivered.
func TestAsyncInvocationUp(t *testing.T) {
	testenv.NewPodman(t)
	dataDir := t.TempDir()
	u := startUp(t, dataDir, "", "")
	ctx := context.Background()
	retries := 1
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "work", Runtime: "python3.11", IdleTimeoutSec: 5,
		Async: &apiv1.AsyncConfig{Enabled: true, MaxRetries: &retries}}); err != nil {
		t.Fatal(err)
	}
	if f := u.deploy(t, "work", "python3.11", map[string]string{"handler.py": asyncHandler}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("status %+v\n%s", f.Status, u.logTail())
	}
	waitFor(t, time.Minute, func() bool {
		f, err := u.c.GetFunction(ctx, "work")
		return err == nil && f.Status.Replicas == 0 && f.Status.DesiredReplicas == 0
	}, "the function at zero")
	fnURL := u.url + "/fn/" + u.c.Namespace() + "/work"
	send := func(body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, fnURL, strings.NewReader(body))
		req.Header.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var acc apiv1.AsyncAccepted
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &acc) != nil || acc.ID == "" {
			t.Fatalf("async call: %d %s", resp.StatusCode, b)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("202 took %v: the caller must not wait for the function", d)
		}
		return acc.ID
	}
	ids := map[string]string{}
	for i := range 20 {
		ids[send("ok "+strconv.Itoa(i))] = "ok"
	}
	failID, badID := send("fail"), send("bad")
	state := func(id string) *apiv1.AsyncInvocation {
		inv, err := u.c.GetAsync(ctx, "work", id)
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	waitFor(t, 2*time.Minute, func() bool {
		for id := range ids {
			if state(id).State != apiv1.AsyncSucceeded {
				return false
			}
		}
		return state(failID).State == apiv1.AsyncDeadLettered && state(badID).State == apiv1.AsyncDeadLettered
	}, "20 invocations succeeded, 2 dead-lettered")
	if s := state(failID); len(s.Attempts) != 2 || !strings.Contains(s.Error, "500") {
		t.Errorf("the failing invocation: %+v", s)
	}
	if s := state(badID); len(s.Attempts) != 1 || !strings.Contains(s.Error, "422") {
		t.Errorf("the refused invocation: %+v", s)
	}
	invs, err := u.c.ListInvocations(ctx, "work", 1000, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]int{}
	for _, inv := range invs {
		if inv.Source == apiv1.SourceAsync {
			byID[inv.MessageID]++
		}
	}
	for id := range ids {
		if byID[id] != 1 {
			t.Errorf("invocation %s recorded %d times, want once", id, byID[id])
		}
	}
	dl, err := u.c.ListDeadLetters(ctx, "work", 0)
	if err != nil || len(dl) != 2 {
		t.Fatalf("dead letters: %+v %v", dl, err)
	}

	// Disabled (an http trigger switched off): invocations are accepted and wait, through a
	// restart of sless up; a redriven dead letter waits with them.
	no := false
	if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: apiv1.TriggerHTTP, FunctionRef: "work", Enabled: &no}); err != nil {
		t.Fatal(err)
	}
	waiting := []string{send("later 1"), send("later 2"), send("bad")}
	if _, err := u.c.Redrive(ctx, "work", badID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return state(waiting[0]).Error != "" }, "the first waiting invocation tried")
	for _, id := range waiting {
		if s := state(id); s.State.Done() || len(s.Attempts) != 0 {
			t.Fatalf("invocation %s of a disabled function: %+v", id, s)
		}
	}
	if code, m := u.Metrics(""); code != 200 || !strings.Contains(m, "sless_async_accepted_total 25\n") {
		t.Errorf("/metrics: %d, want 25 accepted:\n%s", code, grepLines(m, "sless_async_accepted_total"))
	}
	listen, regAddr := u.Listen, u.RegAddr
	u.stop()
	u = startUp(t, dataDir, listen, regAddr)
	for _, id := range waiting {
		if s := state(id); s.State.Done() {
			t.Fatalf("after the restart, %s is %s", id, s.State)
		}
	}
	if _, err := u.c.SetTriggerEnabled(ctx, "web", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, func() bool {
		return state(waiting[0]).State == apiv1.AsyncSucceeded && state(waiting[1]).State == apiv1.AsyncSucceeded &&
			state(waiting[2]).State == apiv1.AsyncDeadLettered && state(badID).State == apiv1.AsyncDeadLettered && state(badID).Redriven != nil
	}, "the waiting invocations delivered after the restart")
	if s := state(badID); len(s.Attempts) != 2 {
		t.Errorf("the redriven invocation: %d attempts, want 2 (one before, one after the redrive): %+v", len(s.Attempts), s)
	}
	// On /metrics since the restart: what became of the deliveries, and the queue.
	code, m := u.Metrics("")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{`sless_deliveries_total{result="acked",source="async"} 2`, `sless_deliveries_total{result="dead_lettered",source="async"} 2`,
		`sless_async_queue_depth{function="work",namespace="` + u.c.Namespace() + `"} 0`, `sless_async_dead_letters{function="work",namespace="` + u.c.Namespace() + `"} 3`} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s\n%s", want, grepLines(m, "sless_async_"), grepLines(m, "sless_deliveries_total"))
		}
	}
}
