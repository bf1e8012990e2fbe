package apitest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/rabbitmq"
)

// Event headers are the platform's: a public caller's X-Sless-Event-* never reach the function
// (so a handler can trust the message id it de-duplicates on) and a function's X-Sless-Error never
// reaches the caller (so an event source can trust that /fn/, not the function, refused). Through
// the in-process entry for event sources (Server.Events) they do reach the function, and the
// invocation is recorded with its source and message id.
func testProxyEventHeaders(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("echo")
	seen := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
		w.Header().Set(apiv1.HeaderError, "forged")
		w.WriteHeader(http.StatusTooManyRequests) // the function's own 429: not back-pressure
	}))
	t.Cleanup(up.Close)
	e.Ready("echo", up.URL)

	req, _ := http.NewRequest("POST", e.URL+"/fn/"+e.NS+"/echo", strings.NewReader("x"))
	req.Header.Set(apiv1.HeaderEventSource, apiv1.SourceRabbitMQ)
	req.Header.Set(apiv1.HeaderEventMessageID, "forged-id")
	req.Header.Set("x-sless-event-redelivered", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get(apiv1.HeaderError) != "" {
		t.Errorf("the function's 429: %d, %s %q", resp.StatusCode, apiv1.HeaderError, resp.Header.Get(apiv1.HeaderError))
	}
	for k := range <-seen {
		if strings.HasPrefix(strings.ToLower(k), strings.ToLower(apiv1.HeaderEventPrefix)) {
			t.Errorf("a public caller's %s reached the function", k)
		}
	}

	// /fn/'s own refusals say so.
	resp, err = http.Get(e.URL + "/fn/" + e.NS + "/ghost")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get(apiv1.HeaderError) != apiv1.CodeNotFound {
		t.Errorf("/fn/'s 404: %d, %s %q", resp.StatusCode, apiv1.HeaderError, resp.Header.Get(apiv1.HeaderError))
	}

	// The event sources' entry, as a rabbitmq trigger's consumer uses it.
	inv := rabbitmq.FunctionInvoker{Namespace: e.NS, Function: "echo", Trigger: "orders", Handler: e.Srv.Events()}
	out := inv.Invoke(context.Background(), rabbitmq.Message{Body: []byte(`{"order":1}`), ContentType: "application/json", MessageID: "m-1",
		CorrelationID: "c-1", RoutingKey: "orders", Redelivered: true, DeliveryCount: 3, Headers: map[string]any{"tenant": "a\r\nb", "n": int32(7)}})
	if out.Status != 429 || !out.FromFunction {
		t.Errorf("outcome %+v: the function's own 429", out)
	}
	h := <-seen
	for k, want := range map[string]string{apiv1.HeaderEventSource: "rabbitmq", apiv1.HeaderEventTrigger: "orders", apiv1.HeaderEventMessageID: "m-1",
		apiv1.HeaderEventCorrelationID: "c-1", apiv1.HeaderEventRoutingKey: "orders", apiv1.HeaderEventRedelivered: "true",
		apiv1.HeaderEventDeliveryCount: "3", "Content-Type": "application/json"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	var headers map[string]any
	if err := json.Unmarshal([]byte(h.Get(apiv1.HeaderEventHeaders)), &headers); err != nil || headers["tenant"] != "a\r\nb" || headers["n"] != float64(7) {
		t.Errorf("%s %q: %v", apiv1.HeaderEventHeaders, h.Get(apiv1.HeaderEventHeaders), err)
	}
	out = rabbitmq.FunctionInvoker{Namespace: e.NS, Function: "ghost", Handler: e.Srv.Events()}.Invoke(context.Background(), rabbitmq.Message{MessageID: "m-2"})
	if out.Status != 404 || out.FromFunction {
		t.Errorf("outcome %+v: /fn/'s own 404", out)
	}

	invs, err := e.Be.Invocations.List(context.Background(), e.NS, "echo", objects.InvocationQuery{})
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{}
	for _, i := range invs {
		sources[i.MessageID] = i.Source
	}
	if len(invs) != 2 || sources[""] != "" || sources["m-1"] != apiv1.SourceRabbitMQ {
		t.Errorf("invocations %+v: want one public (no source) and one from rabbitmq with its message id", invs)
	}
}

// A rabbitmq trigger is stored with its defaults filled in where the backend runs them, and
// refused with a 400 saying so where it does not (nothing stored).
func testRabbitMQTriggerSpec(t *testing.T, bk Backend) {
	e := NewEnv(t, bk)
	e.Ensure()
	e.Function("target")
	ctx := context.Background()
	c := e.C
	tr, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "orders", Type: apiv1.TriggerRabbitMQ, FunctionRef: "target",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders"}})
	if !e.Be.Runs(apiv1.TriggerRabbitMQ) {
		if ae, ok := errors.AsType[*apiv1.Error](err); !ok || ae.Status != 400 || !strings.Contains(ae.Message, "does not run rabbitmq triggers") {
			t.Errorf("a backend without rabbitmq triggers: %v", err)
		}
		if ts, _ := e.Be.Triggers.List(ctx, e.NS); len(ts) != 0 {
			t.Errorf("stored: %+v", ts)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	mq := tr.RabbitMQ
	if mq == nil || mq.Prefetch != apiv1.DefaultPrefetch || mq.MaxRetries == nil || *mq.MaxRetries != apiv1.DefaultMaxRetries ||
		mq.RetryBackoffMS != apiv1.DefaultRetryBackoffMS || mq.DeadLetter != "orders.dlq" || mq.Passive {
		t.Errorf("defaults: %+v", mq)
	}
	zero := 0
	tr, err = c.CreateTrigger(ctx, apiv1.Trigger{Name: "strict", Type: apiv1.TriggerRabbitMQ, FunctionRef: "target",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "in", Passive: true, Prefetch: 1, MaxRetries: &zero, RetryBackoffMS: 5, DeadLetter: "failed"}})
	if err != nil || tr.RabbitMQ == nil || *tr.RabbitMQ.MaxRetries != 0 || tr.RabbitMQ.Prefetch != 1 || !tr.RabbitMQ.Passive || tr.RabbitMQ.DeadLetter != "failed" {
		t.Errorf("given values: %+v %v", tr, err)
	}
}
