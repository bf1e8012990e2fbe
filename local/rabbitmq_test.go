package local_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// mqHandler answers a message with its id, fails on "fail" (500: retried, then dead-lettered) and
// refuses "bad" with its own 422 (dead-lettered at once).
const mqHandler = `def handle(event):
    body = event["body"]
    if body == "fail":
        raise RuntimeError("poison message")
    if body == "bad":
        return {"statusCode": 422, "body": "no"}
    h = event["headers"]
    return {"id": h.get("x-sless-event-message-id"), "source": h.get("x-sless-event-source")}
`

// A rabbitmq trigger on a real sless up and a real broker: every message reaches the function
// through /fn/ (a function at zero is started for it), is acknowledged after the 2xx and
// recorded as an invocation with its source and message id; a failing one is retried, then
// dead-lettered with its error; the function's own 4xx is dead-lettered at once; a disabled
// trigger leaves messages queued; a missing secret and a broker on the platform's own address are
// reported in the trigger's status.
func TestRabbitMQTriggerUp(t *testing.T) {
	testenv.NewPodman(t)
	mq := testenv.StartRabbitMQ(t)
	u := startUp(t, t.TempDir(), "", "", "--allow-broker", mq.Addr())
	ctx := context.Background()
	if _, err := u.c.PutSecret(ctx, "mq", map[string]string{"url": mq.URL()}); err != nil {
		t.Fatal(err)
	}
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "orders", Runtime: "python3.11", IdleTimeoutSec: 5}); err != nil {
		t.Fatal(err)
	}
	if f := u.deploy(t, "orders", "python3.11", map[string]string{"handler.py": mqHandler}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("status %+v\n%s", f.Status, u.logTail())
	}
	retries := 2
	if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "orders", Type: apiv1.TriggerRabbitMQ, FunctionRef: "orders",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders", Prefetch: 5, MaxRetries: &retries, RetryBackoffMS: 10}}); err != nil {
		t.Fatal(err)
	}
	trigger := func(name string) apiv1.TriggerStatus {
		t.Helper()
		tr, err := u.c.GetTrigger(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status
	}
	waitFor(t, time.Minute, func() bool { return trigger("orders").Connected }, "the trigger connected")

	// The function goes to zero first: the first message wakes it.
	waitFor(t, time.Minute, func() bool {
		f, err := u.c.GetFunction(ctx, "orders")
		return err == nil && f.Status.Replicas == 0 && f.Status.DesiredReplicas == 0
	}, "the function at zero")
	ids := []string{"fail", "bad"}
	for i := range 30 {
		ids = append(ids, "m"+strconv.Itoa(i))
	}
	publishMQ(t, mq, "orders", ids...)
	waitFor(t, 2*time.Minute, func() bool {
		s := trigger("orders")
		return s.DeliveredTotal == 30 && s.DeadLetteredTotal == 2 && s.InFlight == 0
	}, "30 messages delivered and 2 dead-lettered")

	invs, err := u.c.ListInvocations(ctx, "orders", 1000, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]int{}
	for _, inv := range invs {
		if inv.Source == apiv1.SourceRabbitMQ {
			byID[inv.MessageID] = append(byID[inv.MessageID], inv.Status)
		}
	}
	for _, id := range ids[2:] {
		if s := byID[id]; len(s) != 1 || s[0] != 200 {
			t.Errorf("message %s: invocations %v, want one 200", id, s)
		}
	}
	if s := byID["fail"]; len(s) != 3 || s[0] != 500 {
		t.Errorf("the failing message: invocations %v, want 3 (max_retries 2) of 500", s)
	}
	if s := byID["bad"]; len(s) != 1 || s[0] != 422 {
		t.Errorf("the refused message: invocations %v, want one 422", s)
	}
	dead := mq.Drain(t, "orders.dlq")
	if e, _ := dead["fail"].Headers["x-sless-error"].(string); !strings.Contains(e, "500") {
		t.Errorf("dead letter of fail: %v", dead["fail"].Headers)
	}
	if e, _ := dead["bad"].Headers["x-sless-error"].(string); !strings.Contains(e, "422") {
		t.Errorf("dead letter of bad: %v", dead["bad"].Headers)
	}
	if len(dead) != 2 {
		t.Errorf("dead letters: %d", len(dead))
	}
	// Each dead letter is a Warning event on the function, naming the message.
	waitFor(t, 10*time.Second, func() bool {
		evs, err := u.c.ListEvents(ctx, "orders")
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, ev := range evs {
			if ev.Reason == apiv1.ReasonDeadLettered && ev.Type == apiv1.EventWarning {
				for _, id := range []string{"fail", "bad"} {
					if strings.Contains(ev.Message, "message "+id+" of rabbitmq trigger orders dead-lettered to orders.dlq") {
						seen[id] = true
					}
				}
			}
		}
		return seen["fail"] && seen["bad"]
	}, "a DeadLettered event for each dead letter")

	// Disabled: not consuming; the messages wait in the queue and are delivered once enabled.
	if _, err := u.c.SetTriggerEnabled(ctx, "orders", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() bool { s := trigger("orders"); return !s.Connected && !s.Active }, "the disabled trigger idle")
	publishMQ(t, mq, "orders", "later-1", "later-2")
	if q := mq.Queue(t, "orders"); q.Consumers != 0 || q.Messages != 2 {
		t.Errorf("disabled: queue %+v, want 2 messages and no consumer", q)
	}
	if _, err := u.c.SetTriggerEnabled(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() bool { return trigger("orders").DeliveredTotal == 2 }, "the queued messages delivered once enabled")

	t.Run("missing secret", func(t *testing.T) {
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "nosecret", Type: apiv1.TriggerRabbitMQ, FunctionRef: "orders",
			RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "absent/url", Queue: "other"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(trigger("nosecret").LastError, `secret "absent"`) }, "the missing secret reported")
		// Once the secret exists, it consumes.
		if _, err := u.c.PutSecret(ctx, "absent", map[string]string{"url": mq.URL()}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return trigger("nosecret").Connected }, "connected once the secret exists")
	})
	t.Run("the platform's own address", func(t *testing.T) {
		// The API's own port, with the broker's credentials: never dialled.
		own := "amqp://u:p@" + strings.TrimPrefix(u.url, "http://") + "/"
		if _, err := u.c.PutSecret(ctx, "own", map[string]string{"url": own}); err != nil {
			t.Fatal(err)
		}
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "own", Type: apiv1.TriggerRabbitMQ, FunctionRef: "orders",
			RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "own/url", Queue: "x"}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool { return strings.Contains(trigger("own").LastError, "platform's own host") },
			"the own address refused: "+own)
		t.Logf("status: %+v", trigger("own"))
		if s := trigger("own"); s.Connected || strings.Contains(s.LastError, "u:p") {
			t.Errorf("status %+v", s)
		}
	})
}

// publishMQ sends one message per id, its body the id for "fail" and "bad", else "ok <id>".
func publishMQ(t *testing.T, mq *testenv.RabbitMQ, queue string, ids ...string) {
	t.Helper()
	msgs := make([]amqp.Publishing, len(ids))
	for i, id := range ids {
		body := "ok " + id
		if id == "fail" || id == "bad" {
			body = id
		}
		msgs[i] = amqp.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte(body)}
	}
	mq.Publish(t, queue, msgs...)
}
