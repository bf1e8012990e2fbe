package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/objects"
)

// A namespace's event source outside the API's process (the Kubernetes consumer) reports its
// deliveries with its namespace's token: counted on sless_deliveries_total{source="rabbitmq"},
// each dead letter a DeadLettered Warning event on the stored trigger's function. Without the
// namespace's own token, for a trigger that is not a rabbitmq trigger, or with counts out of bounds
// nothing is counted or recorded.
func testDeliveryReport(t *testing.T, bk Backend) {
	key := []byte("test event key, 32 bytes long...")
	withMQ := bk
	withMQ.New = func(t testing.TB, code codestore.Store, r objects.Resolver) (objects.Backend, Controller) {
		b, c := bk.New(t, code, r)
		if !b.Runs(apiv1.TriggerRabbitMQ) {
			b.TriggerTypes = []apiv1.TriggerType{apiv1.TriggerHTTP, apiv1.TriggerCron, apiv1.TriggerRabbitMQ}
		}
		return b, c
	}
	e := NewEnv(t, withMQ, api.WithEventKey(key))
	e.Ensure()
	e.Function("orders-fn")
	e.Function("web-fn")
	ctx := context.Background()
	if _, err := e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "orders", Type: apiv1.TriggerRabbitMQ, FunctionRef: "orders-fn",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.C.CreateTrigger(ctx, apiv1.Trigger{Name: "web", Type: apiv1.TriggerHTTP, FunctionRef: "web-fn"}); err != nil {
		t.Fatal(err)
	}
	post := func(ns, token string, body any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		if s, ok := body.(string); ok {
			b = []byte(s)
		}
		req, _ := http.NewRequest(http.MethodPost, e.URL+"/events/"+ns+"/deliveries", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set(apiv1.HeaderEventToken, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	counted := func(result string) float64 {
		mfs, err := e.Srv.Metrics().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sless_deliveries_total" {
				continue
			}
			for _, m := range mf.Metric {
				labels := map[string]string{}
				for _, l := range m.Label {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["source"] == apiv1.SourceRabbitMQ && labels["result"] == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	good := apiv1.EventToken(key, e.NS)
	other := apiv1.NamespaceFor("mallory@example.com")
	valid := apiv1.DeliveryReport{Trigger: "orders", Acked: 1}
	for _, c := range []struct {
		name, ns, token string
		body            any
		want            int
	}{
		{"no token", e.NS, "", valid, 401},
		{"a forged token", e.NS, strings.Repeat("0", 64), valid, 401},
		{"another namespace's token", e.NS, apiv1.EventToken(key, other), valid, 401},
		{"a token under another key", e.NS, apiv1.EventToken([]byte("another key"), e.NS), valid, 401},
		{"another namespace's path with its own token", other, apiv1.EventToken(key, other), valid, 404},
		{"no such trigger", e.NS, good, apiv1.DeliveryReport{Trigger: "ghost", Acked: 1}, 404},
		{"an http trigger", e.NS, good, apiv1.DeliveryReport{Trigger: "web", Acked: 1}, 400},
		{"a negative count", e.NS, good, apiv1.DeliveryReport{Trigger: "orders", Acked: -1}, 400},
		{"a count out of bounds", e.NS, good, apiv1.DeliveryReport{Trigger: "orders", Retried: apiv1.MaxReportedCount + 1}, 400},
		{"more dead letters named than counted", e.NS, good, apiv1.DeliveryReport{Trigger: "orders", DeadLettered: 0,
			DeadLetters: []apiv1.ReportedDeadLetter{{MessageID: "x", Queue: "orders.dlq", Reason: "r"}}}, 400},
		{"an unknown field", e.NS, good, `{"trigger":"orders","acked":1,"function":"web-fn"}`, 400},
		{"a bad trigger name", e.NS, good, apiv1.DeliveryReport{Trigger: "../x", Acked: 1}, 400},
	} {
		if code := post(c.ns, c.token, c.body); code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
	}
	if n := counted("acked"); n != 0 {
		t.Fatalf("refused reports counted %v", n)
	}
	if evs, _ := e.C.ListEvents(ctx, "web-fn"); len(evs) != 0 {
		t.Fatalf("refused reports recorded events: %+v", evs)
	}

	if code := post(e.NS, good, apiv1.DeliveryReport{Trigger: "orders", Acked: 7, Retried: 3, DeadLettered: 3,
		DeadLetters: []apiv1.ReportedDeadLetter{{MessageID: "m-1", Queue: "orders.dlq", Reason: "the function answered 500 after 6 attempts"},
			{MessageID: "m-2", Queue: "orders.dlq", Reason: "the function answered 422"}}}); code != http.StatusNoContent {
		t.Fatalf("a valid report: %d", code)
	}
	if a, r, d := counted("acked"), counted("retried"), counted("dead_lettered"); a != 7 || r != 3 || d != 3 {
		t.Errorf("counted acked %v retried %v dead_lettered %v, want 7 3 3", a, r, d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, _ := e.C.ListEvents(ctx, "orders-fn")
		var msgs []string
		for _, ev := range evs {
			if ev.Reason == apiv1.ReasonDeadLettered && ev.Type == apiv1.EventWarning {
				msgs = append(msgs, ev.Message)
			}
		}
		all := strings.Join(msgs, "\n")
		if len(msgs) == 3 && strings.Contains(all, "message m-1 of rabbitmq trigger orders dead-lettered to orders.dlq: the function answered 500") &&
			strings.Contains(all, "message m-2 of") && strings.Contains(all, "1 more messages of rabbitmq trigger orders") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events: %q", msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
