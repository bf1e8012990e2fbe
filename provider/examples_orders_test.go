package provider_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// checkOrders is examples/orders-rabbitmq's check against a real broker: the handler totals an
// order and refuses a malformed one over /fn/; the trigger connects; published messages are
// delivered (a good order twice under one message id, both answered 2xx) and a malformed one is
// dead-lettered at once with the function's 422; an asynchronous invocation is accepted and
// succeeds.
func checkOrders(t *testing.T, u *testenv.SlessUp, mq *testenv.RabbitMQ, o map[string]string) {
	ctx := t.Context()
	if o["queue"] != "orders" || o["dead_letter"] != "orders.dlq" {
		t.Errorf("outputs queue %q, dead_letter %q", o["queue"], o["dead_letter"])
	}
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(o["url"], "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("/fn/ answered %d %q: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, got
	}
	if code, got := post(`{"order_id": "1000", "items": [{"sku": "A-1", "qty": 2, "price": 3.5}, {"sku": "B-2", "qty": 1, "price": 1}]}`); code != 200 || got["total"] != 8.0 || got["duplicate"] != false {
		t.Errorf("an order over /fn/: %d %v, want 200 with total 8", code, got)
	}
	if code, got := post(`{"order_id": "1000", "items": []}`); code != 422 || got["error"] != "an order needs items" {
		t.Errorf("an order without items over /fn/: %d %v, want 422", code, got)
	}

	trigger := func() apiv1.TriggerStatus {
		tr, err := u.Client.GetTrigger(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status
	}
	eventually(t, time.Minute, func() bool { return trigger().Connected }, "the trigger connected to the broker")
	order := []byte(`{"order_id": "1001", "items": [{"sku": "A-1", "qty": 3, "price": 2.5}]}`)
	mq.Publish(t, "orders",
		amqp.Publishing{MessageId: "m-1001", ContentType: "application/json", Body: order},
		amqp.Publishing{MessageId: "m-1001", ContentType: "application/json", Body: order}, // published twice: processed once
		amqp.Publishing{MessageId: "m-bad", ContentType: "text/plain", Body: []byte("not an order")})
	eventually(t, 2*time.Minute, func() bool {
		s := trigger()
		return s.DeliveredTotal == 2 && s.DeadLetteredTotal == 1 && s.InFlight == 0
	}, "2 messages delivered and 1 dead-lettered")
	dead := mq.Drain(t, "orders.dlq")
	if e, _ := dead["m-bad"].Headers["x-sless-error"].(string); len(dead) != 1 || !strings.Contains(e, "422") {
		t.Errorf("dead letters %d, m-bad's x-sless-error %q; want only m-bad, with the function's 422", len(dead), e)
	}
	invs, err := u.Client.ListInvocations(ctx, "orders", 100, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]int{}
	for _, inv := range invs {
		if inv.Source == apiv1.SourceRabbitMQ {
			byID[inv.MessageID] = append(byID[inv.MessageID], inv.Status)
		}
	}
	if s := byID["m-1001"]; len(s) != 2 || s[0] != 200 || s[1] != 200 {
		t.Errorf("m-1001's invocations: %v, want two 200s", s)
	}
	if s := byID["m-bad"]; len(s) != 1 || s[0] != 422 {
		t.Errorf("m-bad's invocations: %v, want one 422 (no retry)", s)
	}

	// The async block: /fn/ takes an asynchronous invocation and the platform delivers it.
	code, body := postEvent(t, u, "orders", `{"order_id": "1002", "items": [{"sku": "C-3", "qty": 1, "price": 10}]}`)
	var accepted apiv1.AsyncAccepted
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &accepted) != nil || accepted.ID == "" {
		t.Fatalf("an asynchronous invocation: %d %s, want 202 with an id", code, body)
	}
	eventually(t, time.Minute, func() bool {
		inv, err := u.Client.GetAsync(ctx, "orders", accepted.ID)
		return err == nil && inv.State == apiv1.AsyncSucceeded
	}, "the asynchronous invocation succeeded")
}

// eventually polls ok until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, ok func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
	}
}
