package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
)

// asyncWorker fails on "fail" (500: retried, then dead-lettered); anything else is answered.
const asyncWorker = `def handle(event):
    if event["body"] == "fail":
        raise RuntimeError("poison")
    return "done"
`

// Asynchronous invocation on the real cluster, its queue in PostgreSQL: 300 invocations accepted
// (202) through both API replicas while one of them is deleted mid-run; every one is delivered
// (each API replica dispatches; a claim is one replica's) or, for the failing one, dead-lettered
// after its retries; none lost, duplicates counted from the invocation records; another tenant
// reads and redrives nothing.
func TestAsyncOnKubernetes(t *testing.T) {
	c := tenant(t, subject("async"))
	ctx := context.Background()
	retries := 1
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "work", Runtime: "python3.11", MinReplicas: 1,
		Async: &apiv1.AsyncConfig{Enabled: true, MaxRetries: &retries}}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "work", "python3.11", map[string]string{"handler.py": asyncWorker})
	const n = 300
	send := func(body string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, f.Status.URL, strings.NewReader(body))
		req.Header.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var acc apiv1.AsyncAccepted
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &acc) != nil {
			return "", fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return acc.ID, nil
	}
	var mu sync.Mutex
	var ids []string
	var refused []string
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id, err := send(fmt.Sprint("ok ", i))
				mu.Lock()
				if err != nil {
					refused = append(refused, err.Error())
				} else {
					ids = append(ids, id)
				}
				mu.Unlock()
			}
		}()
	}
	failID, err := send("fail")
	if err != nil {
		t.Fatal(err)
	}
	victim := pods(t, "sless-api")[0].Name
	for i := range n {
		if i == n/3 {
			kubectl(t, "-n", "sless-system", "delete", "pod", victim, "--wait=false")
		}
		next <- i
	}
	close(next)
	wg.Wait()
	// A replica going away refuses nothing it took: an answer it gave is stored. A request its
	// connection was cut under was never answered 202 (the client retries; none here expected).
	if len(refused) > 0 {
		t.Logf("%d of %d sends failed while a replica went away: %v", len(refused), n, refused[:min(5, len(refused))])
	}
	if len(ids) < n*9/10 {
		t.Fatalf("only %d of %d accepted", len(ids), n)
	}
	state := func(id string) apiv1.AsyncState {
		inv, err := c.GetAsync(ctx, "work", id)
		if err != nil {
			return ""
		}
		return inv.State
	}
	waitFor(t, "every accepted invocation delivered", 5*time.Minute, func() bool {
		for _, id := range ids {
			if state(id) != apiv1.AsyncSucceeded {
				return false
			}
		}
		return state(failID) == apiv1.AsyncDeadLettered
	})
	fi, err := c.GetAsync(ctx, "work", failID)
	if err != nil || len(fi.Attempts) != 2 || !strings.Contains(fi.Error, "500") {
		t.Errorf("the failing invocation: %+v %v", fi, err)
	}
	// Duplicates: attempts per accepted invocation as the history recorded them.
	calls := map[string]int{}
	var before time.Time
	for {
		page, err := c.ListInvocations(ctx, "work", 1000, before)
		if err != nil {
			t.Fatal(err)
		}
		for _, inv := range page {
			if inv.Source == apiv1.SourceAsync && inv.Status == 200 {
				calls[inv.MessageID]++
			}
		}
		if len(page) < 1000 {
			break
		}
		before = page[len(page)-1].Time
	}
	dups, lost := 0, 0
	for _, id := range ids {
		switch k := calls[id]; {
		case k == 0:
			lost++
		case k > 1:
			dups += k - 1
		}
	}
	t.Logf("async delivery: accepted=%d answered=%d duplicates=%d dead_lettered=1 lost=%d (a sless-api pod deleted mid-run)", len(ids)+1, len(ids)-lost, dups, lost)
	if lost != 0 {
		t.Errorf("%d succeeded invocations have no 200 in the history (it may have dropped records while a replica went: check sless_invocations_dropped_total)", lost)
	}

	// Another tenant: nothing of ours to read or redrive.
	other := tenant(t, subject("async-other"))
	if _, err := other.GetAsync(ctx, "work", failID); !apiclient.IsNotFound(err) {
		t.Errorf("another tenant read an invocation: %v", err)
	}
	if _, err := other.Redrive(ctx, "work", failID); !apiclient.IsNotFound(err) {
		t.Errorf("another tenant redrove an invocation: %v", err)
	}
	dl, err := c.ListDeadLetters(ctx, "work", 0)
	if err != nil || len(dl) != 1 || dl[0].ID != failID {
		t.Errorf("dead letters: %+v %v", dl, err)
	}
}
