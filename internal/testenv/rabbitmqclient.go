package testenv

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Channel connects to the broker as the test user and opens a channel, both closed when the test
// ends.
func (r *RabbitMQ) Channel(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// Publish declares queue (durable) and publishes msgs to it persistently, waiting for the broker's
// confirm of each.
func (r *RabbitMQ) Publish(t testing.TB, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	ch := r.Channel(t)
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	confs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		m.DeliveryMode = amqp.Persistent
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, m)
		if err != nil {
			t.Fatal(err)
		}
		confs[i] = c
	}
	for i, c := range confs {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("message %q not confirmed: %v %v", msgs[i].MessageId, ok, err)
		}
	}
}

// Drain takes every message now in queue (acknowledged) and returns them by message id.
func (r *RabbitMQ) Drain(t testing.TB, queue string) map[string]amqp.Delivery {
	t.Helper()
	ch := r.Channel(t)
	defer ch.Close()
	out := map[string]amqp.Delivery{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("reading %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out[d.MessageId] = d
	}
}

// Queue is queue's state now (messages ready, consumers); a missing queue fails the test.
func (r *RabbitMQ) Queue(t testing.TB, queue string) amqp.Queue {
	t.Helper()
	ch := r.Channel(t)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
