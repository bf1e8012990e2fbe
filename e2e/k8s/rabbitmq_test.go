package k8s_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/k1n"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/operator/resources"
)

// forward hands every connection l accepts to addr until the test ends (the broker listens on
// 127.0.0.1, which pods cannot reach; l is on the node address the install lets one namespace
// reach). A stopped broker closes what was forwarded, as a broker restart does.
func forward(t *testing.T, l net.Listener, addr string) {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go func() { io.Copy(out, in); out.Close(); in.Close() }()
			go func() { io.Copy(in, out); out.Close(); in.Close() }()
		}
	}()
	t.Cleanup(func() {
		l.(*net.TCPListener).SetDeadline(time.Now())
		<-done
		l.(*net.TCPListener).SetDeadline(time.Time{})
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
}

// answers are the rabbitmq invocations of ns/fn in the invocation history: 2xx answers per
// message id, and every attempt.
func answers(t *testing.T, ns, fn string) (ok map[string]int, attempts int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cluster.Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT message_id, status FROM invocations WHERE namespace = $1 AND function = $2 AND source = $3", ns, fn, apiv1.SourceRabbitMQ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ok = map[string]int{}
	for rows.Next() {
		var id string
		var status int
		if err := rows.Scan(&id, &status); err != nil {
			t.Fatal(err)
		}
		attempts++
		if status >= 200 && status < 300 {
			ok[id]++
		}
	}
	return ok, attempts
}

// Issue 30 on the real cluster: a namespace's rabbitmq triggers run in its consumer pod, reach
// the broker (outside the cluster, on the host) under the namespace's egress rules and call /fn/
// through the API's Service with the namespace's token. One namespace, one function, one broker:
//   - a function at zero is woken by the first message;
//   - 1,000 messages, the function failing 20 % of calls at random, the broker restarted, the
//     consumer pod deleted and the controller leader deleted mid-run: every message is answered
//     2xx at least once or dead-lettered, none lost (duplicates counted);
//   - a trigger whose secret is missing says so in its status while the other consumes;
//   - a namespace whose egress does not allow the broker never reaches it;
//   - a forged token, or another namespace's, does not make a public request an event.
func TestRabbitMQOnKubernetes(t *testing.T) {
	t.Parallel()
	needCluster(t)
	ctx := context.Background()
	mq := testenv.StartRabbitMQ(t)
	forward(t, cluster.Broker, mq.Addr())
	brokerURL := (&url.URL{Scheme: "amqp", User: url.UserPassword(mq.User, mq.Password), Host: cluster.Broker.Addr().String(), Path: "/"}).String()

	// A fixed subject (the install names its namespace): a previous run's may still be going.
	ns := apiv1.NamespaceFor(k1n.BrokerSubject)
	waitFor(t, "the broker tenant's namespace from an earlier run to go", 2*time.Minute, func() bool {
		var n corev1.Namespace
		err := cluster.Kube.Get(ctx, client.ObjectKey{Name: ns}, &n)
		return client.IgnoreNotFound(err) == nil && (err != nil || n.DeletionTimestamp.IsZero())
	})
	c := tenant(t, k1n.BrokerSubject)
	plain := tenant(t, subject("mq-plain"))
	for _, tc := range []*apiclient.Client{c, plain} {
		if _, err := tc.PutSecret(ctx, "mq", map[string]string{"url": brokerURL}); err != nil {
			t.Fatal(err)
		}
	}
	// The namespace whose egress does not allow the broker: its consumer starts, and stays out.
	// (Its function is never built: nothing reaches it.)
	if _, err := plain.CreateFunction(ctx, apiv1.Function{Name: "none", Runtime: "python3.11"}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateTrigger(ctx, apiv1.Trigger{Name: "blocked", Type: apiv1.TriggerRabbitMQ, FunctionRef: "none",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "blocked"}}); err != nil {
		t.Fatal(err)
	}

	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "sink", Runtime: "python3.11", IdleTimeoutSec: 5, MaxReplicas: 3, Concurrency: 20}); err != nil {
		t.Fatal(err)
	}
	deploy(t, c, "sink", "python3.11", map[string]string{"handler.py": "import random, time\n\n" +
		"def handle(event):\n    time.sleep(0.02)\n    if random.random() < 0.2:\n        return {'statusCode': 500, 'body': 'unlucky'}\n    return 'ok'\n"})
	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "ghost", Type: apiv1.TriggerRabbitMQ, FunctionRef: "sink",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "nosuch/url", Queue: "ghost"}}); err != nil {
		t.Fatal(err)
	}

	t.Run("a forged or another namespace's token is not an event", func(t *testing.T) {
		key, err := os.ReadFile(filepath.Join(cluster.Dir, "event-key"))
		if err != nil {
			t.Fatal(err)
		}
		for id, tok := range map[string]string{"forged-other-ns": apiv1.EventToken([]byte(strings.TrimSpace(string(key))), plain.Namespace()),
			"forged-garbage": strings.Repeat("ab", 32)} {
			req, _ := http.NewRequest(http.MethodPost, cluster.Endpoint+"/fn/"+ns+"/sink", strings.NewReader("x"))
			req.Header.Set(apiv1.HeaderEventToken, tok)
			req.Header.Set(apiv1.HeaderEventSource, apiv1.SourceRabbitMQ)
			req.Header.Set(apiv1.HeaderEventMessageID, id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// Checked with the delivery run's records below (the history is written in batches).
	})

	// Scaled to zero before the first message.
	waitFor(t, "sink scaled to zero", 3*time.Minute, func() bool {
		d := deployment(t, ns, "sink")
		return d != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0
	})

	const total = 1000
	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "orders", Type: apiv1.TriggerRabbitMQ, FunctionRef: "sink",
		RabbitMQ: &apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders", Prefetch: 10, MaxRetries: ptrInt(5), RetryBackoffMS: 200}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]amqp.Publishing, total)
	for i := range msgs {
		msgs[i] = amqp.Publishing{MessageId: "m-" + strconv.Itoa(i), Body: []byte(strconv.Itoa(i))}
	}
	mq.Publish(t, "orders", msgs...)
	start := time.Now()
	delivered := func() int64 {
		tr, err := c.GetTrigger(ctx, "orders")
		if err != nil {
			return 0
		}
		return tr.Status.DeliveredTotal + tr.Status.DeadLetteredTotal
	}
	waitFor(t, "the first message answered (the function woken from zero)", 3*time.Minute, func() bool { return delivered() > 0 })
	t.Logf("first message settled %v after publishing, the function at zero", time.Since(start).Round(time.Millisecond))

	waitFor(t, "150 settled", 3*time.Minute, func() bool { return delivered() >= 150 })
	mq.Stop(t)
	mq.Start(t)
	t.Logf("broker restarted at %d settled", delivered())
	waitFor(t, "400 settled", 3*time.Minute, func() bool { return delivered() >= 400 })
	kubectl(t, "-n", ns, "delete", "pod", "-l", "sless.dev/role=consumer", "--wait=false")
	t.Logf("consumer pod deleted at %d settled", delivered())
	waitFor(t, "650 settled", 3*time.Minute, func() bool { return delivered() >= 650 })
	lead := leader(t)
	kubectl(t, "-n", "sless-system", "delete", "pod", lead, "--wait=false")
	t.Logf("controller leader %s deleted at %d settled", lead, delivered())

	// Every message answered 2xx (in the invocation history) or in the dead-letter queue.
	var ok map[string]int
	var attempts int
	dead := map[string]amqp.Delivery{}
	waitFor(t, "every message answered or dead-lettered", 5*time.Minute, func() bool {
		for id, d := range mq.Drain(t, "orders.dlq") {
			dead[id] = d
		}
		ok, attempts = answers(t, ns, "sink")
		n := 0
		for i := range total {
			id := "m-" + strconv.Itoa(i)
			if ok[id] > 0 || dead[id].MessageId != "" {
				n++
			}
		}
		return n == total
	})
	var duplicates, lost int
	for i := range total {
		id := "m-" + strconv.Itoa(i)
		if ok[id] > 1 {
			duplicates += ok[id] - 1
			t.Logf("duplicate: %s answered 2xx %d times", id, ok[id])
		}
		if ok[id] == 0 && dead[id].MessageId == "" {
			lost++
		}
	}
	line := fmt.Sprintf("delivery: sent=%d answered=%d duplicates=%d dead_lettered=%d lost=%d (attempts=%d, %v)",
		total, len(ok), duplicates, len(dead), lost, attempts, time.Since(start).Round(time.Second))
	t.Log(line)
	fmt.Fprintln(os.Stderr, line)
	if ok["forged-other-ns"] > 0 || ok["forged-garbage"] > 0 || ok[""] > 0 {
		t.Errorf("a public request with a forged or another namespace's token was recorded as an event: %v %v %v", ok["forged-other-ns"], ok["forged-garbage"], ok[""])
	}
	// The status: connected again, its counts carried over the consumer pod's restart (best
	// effort: a stopping pod's last write may race its successor's first read).
	var tr *apiv1.Trigger
	waitFor(t, "orders connected in its status", 30*time.Second, func() bool {
		tr, _ = c.GetTrigger(ctx, "orders")
		return tr != nil && tr.Status.Connected && tr.Status.InFlight == 0
	})
	t.Logf("orders' status: delivered_total=%d dead_lettered_total=%d (acks over both consumer pods, redeliveries included)",
		tr.Status.DeliveredTotal, tr.Status.DeadLetteredTotal)
	// The consumer pods' delivery reports reach the API replicas' sless_deliveries_total (a pod
	// deleted outright may take its last report with it: most, not all, are counted).
	var acked float64
	waitFor(t, "the consumer's deliveries counted on the API's metrics", 30*time.Second, func() bool {
		acked = 0
		for _, p := range pods(t, "sless-api") {
			acked += podMetricOf(t, p.Name, "sless_deliveries_total", `result="acked",source="rabbitmq"`)
		}
		return acked >= float64(total)*9/10
	})
	t.Logf("sless_deliveries_total{source=\"rabbitmq\",result=\"acked\"} over the API replicas: %.0f", acked)

	t.Run("the consumer pod waited for its network policy", func(t *testing.T) {
		var pods corev1.PodList
		cluster.Kube.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(resources.ConsumerLabels()))
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if len(p.Status.InitContainerStatuses) != 1 || p.Status.InitContainerStatuses[0].State.Terminated == nil ||
				p.Status.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
				t.Errorf("consumer pod %s: init containers %+v, want the policy gate done", p.Name, p.Status.InitContainerStatuses)
				continue
			}
			t.Logf("%s: %s", p.Name, strings.TrimSpace(kubectl(t, "-n", ns, "logs", p.Name, "-c", "wait-network-policy")))
		}
	})
	t.Run("a missing secret is its trigger's status", func(t *testing.T) {
		tr, err := c.GetTrigger(ctx, "ghost")
		if err != nil || tr.Status.Connected || !strings.Contains(tr.Status.LastError, `secret "nosuch"`) {
			t.Errorf("ghost: %+v %v", tr, err)
		}
	})
	t.Run("a namespace whose egress does not allow the broker", func(t *testing.T) {
		var tr *apiv1.Trigger
		waitFor(t, "the blocked consumer's error", 2*time.Minute, func() bool {
			tr, _ = plain.GetTrigger(ctx, "blocked")
			return tr != nil && tr.Status.LastError != ""
		})
		if tr.Status.Connected {
			t.Errorf("blocked: connected %+v", tr.Status)
		}
		t.Logf("blocked: %s", tr.Status.LastError)
		if out := mq.Ctl(t, "list_connections", "client_properties"); strings.Contains(out, plain.Namespace()) {
			t.Errorf("the broker saw the blocked namespace's consumer: %s", out)
		}
		var pods corev1.PodList
		cluster.Kube.List(ctx, &pods, client.InNamespace(plain.Namespace()), client.MatchingLabels(resources.ConsumerLabels()))
		if len(pods.Items) == 0 {
			t.Error("the blocked namespace has no consumer pod: the refusal proves nothing")
		}
	})
	if lost != 0 {
		t.Errorf("%d messages lost", lost)
	}
}

func ptrInt(n int) *int { return &n }
