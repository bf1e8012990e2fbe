package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitMQ: a private broker starts on its own ports (never 5672, 25672 or epmd's 4369),
// takes 100 persistent messages into a durable queue with publisher confirms, and still has all
// 100 after Stop and Start.
// When the test is over, neither the node, its helpers nor its epmd are left.
func TestRabbitMQ(t *testing.T) {
	var pids []int
	t.Run("restart", func(t *testing.T) {
		pids = testRabbitMQRestart(t)
	})
	if len(pids) < 3 {
		t.Fatalf("processes of the node and its epmd: %v", pids)
	}
	if left := waitGone(pids, 0); len(left) > 0 {
		t.Errorf("processes %v of the broker are left after its test's cleanup", left)
	}
}

// testRabbitMQRestart is TestRabbitMQ's broker test; it returns the processes the broker ran.
func testRabbitMQRestart(t *testing.T) (pids []int) {
	t0 := time.Now()
	mq := StartRabbitMQ(t)
	defer func() { pids = append(pids, mq.pids()...) }()
	t.Logf("RabbitMQ node %s started in %v (AMQP %d, distribution %d, epmd %d)", mq.Node, time.Since(t0).Round(time.Millisecond), mq.Port, mq.DistPort, mq.EPMDPort)

	ours := map[string]bool{strconv.Itoa(mq.Port): true, strconv.Itoa(mq.DistPort): true, strconv.Itoa(mq.EPMDPort): true}
	found := map[string]bool{}
	for _, l := range listeners(t) {
		host, port, _ := net.SplitHostPort(l.local)
		erlang := strings.Contains(l.process, `"beam`) || strings.Contains(l.process, `"epmd"`)
		if erlang && (port == "5672" || port == "25672" || port == "4369") {
			t.Errorf("an Erlang process listens on a default RabbitMQ port: %s %s", l.local, l.process)
		}
		if ours[port] {
			found[port] = true
			if host != "127.0.0.1" && host != "::1" {
				t.Errorf("the node listens beyond loopback: %s %s", l.local, l.process)
			}
		}
	}
	if len(found) != len(ours) {
		t.Errorf("listening: %v of the node's ports %v", found, ours)
	}

	const queue, n = "sless-test", 100
	conn, ch := amqpChannel(t, mq)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: strconv.Itoa(i), Body: []byte(fmt.Sprintf("message %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("message %d not confirmed: ok=%v err=%v", i, ok, err)
		}
	}
	conn.Close()

	t1 := time.Now()
	mq.Stop(t)
	if mq.Running() {
		t.Fatal("still running after Stop")
	}
	if _, err := amqp.Dial(mq.URL()); err == nil {
		t.Fatal("the stopped broker accepted a connection")
	}
	t2 := time.Now()
	mq.Start(t)
	t.Logf("stop took %v, restart %v", t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))

	conn, ch = amqpChannel(t, mq)
	defer conn.Close()
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < n {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("deliveries closed after %d messages", len(seen))
			}
			if want := "message " + d.MessageId; string(d.Body) != want {
				t.Errorf("message %s: body %q", d.MessageId, d.Body)
			}
			seen[d.MessageId] = true
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("%d of %d messages after the restart", len(seen), n)
		}
	}
	if q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Errorf("queue after consuming: %+v, %v", q, err)
	}
	if out := mq.Ctl(t, "list_queues", "name", "durable"); !strings.Contains(out, queue) {
		t.Errorf("rabbitmqctl list_queues does not list %s: %q", queue, out)
	}
	return nil
}

// amqpChannel connects to mq with its URL (the test user) and opens a channel.
func amqpChannel(t *testing.T, mq *RabbitMQ) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(mq.URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, ch
}

// listener is a listening TCP socket: its local address and the processes holding it.
type listener struct{ local, process string }

// listeners is `ss -ltnp`'s listening TCP sockets.
func listeners(t *testing.T) []listener {
	t.Helper()
	out, err := exec.Command("ss", "-ltnpH").CombinedOutput()
	if err != nil {
		t.Fatalf("ss -ltnp (iproute2): %v: %s", err, out)
	}
	var ls []listener
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line) // State Recv-Q Send-Q Local Peer Process
		if len(f) >= 6 {
			ls = append(ls, listener{local: f[3], process: f[5]})
		}
	}
	return ls
}
