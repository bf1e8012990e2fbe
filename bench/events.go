package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/rabbitmq"
)

// benchEvents measures the event paths of issue 30 into one trivial function (the real python3.11
// runtime serving examples/hello-python), beside /fn/ called directly by the same kind of client:
// a rabbitmq trigger's consumer (a real broker, Debian's rabbitmq-server, on 127.0.0.1) at prefetch
// 1 and 50 — messages/s draining a full queue, and publish → answered latency at a steady rate —
// and asynchronous invocation with the single host's durable queue (bbolt): the 202's latency and
// how fast the dispatcher drains what was accepted.
func benchEvents(ctx context.Context, c config, work string) error {
	fn, direct, err := startHelloPython(ctx)
	if err != nil {
		return err
	}
	defer func() { fn.Process.Kill(); fn.Wait() }()
	dir := filepath.Join(work, "events")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	db, err := state.Open(filepath.Join(dir, "state.db"), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	srv, fnURL, stopAPI, err := startEventsAPI(ctx, dir, direct, db.Async)
	if err != nil {
		return err
	}
	defer stopAPI()
	dctx, stopDispatch := context.WithCancel(ctx)
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); srv.RunAsync(dctx) }()
	defer func() { stopDispatch(); <-dispatched }()
	logf("events: starting RabbitMQ on 127.0.0.1")
	mq, err := testenv.RunRabbitMQ(filepath.Join(dir, "rabbitmq"))
	if err != nil {
		return err
	}
	defer mq.Close()
	conn, err := amqp.Dial(mq.URL())
	if err != nil {
		return err
	}
	defer conn.Close()

	fmt.Printf("\n### Events into a trivial function: a rabbitmq trigger and asynchronous invocation, beside /fn/ (python3.11 runtime serving examples/hello-python; real RabbitMQ %s on 127.0.0.1; the async queue in bbolt)\n\n", "3.10")
	fmt.Println("| path | in flight | rate | p50 (ms) | p99 (ms) | errors |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, conc := range []int{1, 50} {
		r, err := load(ctx, fnURL+"/", conc, 3*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("| /fn/ (anchor: the same function called synchronously) | %d clients | %.0f requests/s | %s | %s | %d |\n",
			conc, r.rps(), ms(r.pct(50)), ms(r.pct(99)), r.errors)
	}
	for _, prefetch := range []int{1, 50} {
		n := 2000
		if prefetch > 1 {
			n = 6000
		}
		rate, err := drainRate(ctx, conn, mq.URL(), srv, prefetch, n)
		if err != nil {
			return err
		}
		fmt.Printf("| rabbitmq trigger, draining %d queued messages | prefetch %d | %.0f messages/s | | | 0 |\n", n, prefetch, rate)
	}
	for _, prefetch := range []int{1, 50} {
		lat, err := steadyLatency(ctx, conn, mq.URL(), srv, prefetch, 200, 5*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("| rabbitmq trigger, publish → function answered, 200 messages/s | prefetch %d | 200 messages/s | %s | %s | 0 |\n",
			prefetch, ms(lat.pct(50)), ms(lat.pct(99)))
	}
	for _, conc := range []int{1, 16} {
		acc, drain, err := asyncRates(ctx, fnURL, db.Async, conc, 2000)
		if err != nil {
			return err
		}
		fmt.Printf("| async: POST with X-Sless-Invocation-Type: Event → 202 (stored in bbolt) | %d clients | %.0f accepted/s | %s | %s | %d |\n",
			conc, acc.rps(), ms(acc.pct(50)), ms(acc.pct(99)), acc.errors)
		fmt.Printf("| async: dispatcher, first 202 → the 2,000th delivered | %d workers | %.0f delivered/s | | | |\n", 32, drain)
	}
	fmt.Println()
	return nil
}

// startEventsAPI serves the API on a memstore backend with queue as its asynchronous queue and
// one Ready function "hello" (async enabled) routed to direct.
func startEventsAPI(ctx context.Context, work, direct string, queue objects.AsyncQueue) (*api.Server, string, func(), error) {
	v, _ := auth.New(auth.WithHS256Secret([]byte("bench-secret-bench-secret-bench-secret")))
	code, _ := codestore.NewDir(filepath.Join(work, "code"))
	u, _ := url.Parse(direct)
	backend, stores := memstore.Backend(code, fixedResolver{u})
	backend.Async = queue
	srv, err := api.New(backend, api.WithVerifier(v), api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))))
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	hs := api.NewHTTPServer("", srv.Handler(), nil)
	go hs.Serve(ln)
	ns := apiv1.NamespaceFor("bench")
	stores.Namespaces.Ensure(ctx, ns)
	retries := 2
	stores.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "hello", Runtime: "python3.11", Concurrency: 100, MaxReplicas: 1,
		Async: &apiv1.AsyncConfig{Enabled: true, MaxRetries: &retries, MaxAgeSec: apiv1.DefaultAsyncMaxAgeSec, MaxQueued: 100_000}})
	stores.Functions.SetStatus(ns, "hello", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady })
	return srv, "http://" + ln.Addr().String() + "/fn/" + ns + "/hello", func() { hs.Close() }, nil
}

// publish sends n persistent messages to queue (declared as a trigger declares it), each with its
// send time, at rate per second (0: as fast as confirms allow).
func publish(ctx context.Context, conn *amqp.Connection, queue string, n int, rate float64) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	start := time.Now()
	var confs []*amqp.DeferredConfirmation
	for i := range n {
		if rate > 0 {
			if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: strconv.Itoa(i), ContentType: "application/json", Body: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Headers: amqp.Table{"x-sent-ns": time.Now().UnixNano()}})
		if err != nil {
			return err
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

// consume runs a trigger's consumer of queue into srv's /fn/ (as sless up runs it), calling seen
// after each 2xx, until ctx ends.
func consume(ctx context.Context, brokerURL, queue string, prefetch int, srv *api.Server, seen func(rabbitmq.Message)) (*rabbitmq.Consumer, error) {
	inv := rabbitmq.FunctionInvoker{Namespace: apiv1.NamespaceFor("bench"), Function: "hello", Trigger: queue, Handler: srv.Events()}
	cons, err := rabbitmq.New(rabbitmq.Config{URL: brokerURL, Queue: queue, DeadLetter: queue + ".dlq", Prefetch: prefetch, Policy: delivery.Policy{MaxRetries: 5}},
		rabbitmq.InvokerFunc(func(ctx context.Context, m rabbitmq.Message) delivery.Outcome {
			o := inv.Invoke(ctx, m)
			if o.Status >= 200 && o.Status < 300 {
				seen(m)
			}
			return o
		}), nil)
	if err != nil {
		return nil, err
	}
	go cons.Run(ctx)
	return cons, nil
}

// drainRate fills a queue with n messages, then times a consumer at prefetch draining it.
func drainRate(ctx context.Context, conn *amqp.Connection, brokerURL string, srv *api.Server, prefetch, n int) (float64, error) {
	queue := fmt.Sprintf("drain-%d", prefetch)
	logf("events: %d messages into %s", n, queue)
	if err := publish(ctx, conn, queue, n, 0); err != nil {
		return 0, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	cons, err := consume(cctx, brokerURL, queue, prefetch, srv, func(rabbitmq.Message) {
		if done.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		return 0, err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("%s: %d of %d delivered in 5 minutes (%+v)", queue, done.Load(), n, cons.Status())
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// steadyLatency publishes at rate for d into a consumed queue and returns each message's publish
// → answered time.
func steadyLatency(ctx context.Context, conn *amqp.Connection, brokerURL string, srv *api.Server, prefetch int, rate float64, d time.Duration) (loadResult, error) {
	queue := fmt.Sprintf("steady-%d", prefetch)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := int(rate * d.Seconds())
	var mu sync.Mutex
	var lat []time.Duration
	all := make(chan struct{})
	cons, err := consume(cctx, brokerURL, queue, prefetch, srv, func(m rabbitmq.Message) {
		sent, _ := m.Headers["x-sent-ns"].(int64)
		mu.Lock()
		defer mu.Unlock()
		lat = append(lat, time.Since(time.Unix(0, sent)))
		if len(lat) == n {
			close(all)
		}
	})
	if err != nil {
		return loadResult{}, err
	}
	for !cons.Status().Connected {
		select {
		case <-cons.Changed():
		case <-time.After(30 * time.Second):
			return loadResult{}, fmt.Errorf("%s: consumer not connected: %+v", queue, cons.Status())
		}
	}
	logf("events: %d messages at %.0f/s through %s", n, rate, queue)
	if err := publish(ctx, conn, queue, n, rate); err != nil {
		return loadResult{}, err
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		return loadResult{}, fmt.Errorf("%s: not all %d answered", queue, n)
	}
	mu.Lock()
	defer mu.Unlock()
	return loadResult{lat: slices.Clone(lat), dur: d}, nil
}

// asyncRates sends n asynchronous invocations from conc clients (the 202's latency) and times the
// dispatcher from the first 202 until the queue is empty again.
func asyncRates(ctx context.Context, fnURL string, q objects.AsyncQueue, conc, n int) (loadResult, float64, error) {
	var sent atomic.Int64
	start := time.Now()
	accepted := drive(ctx, conc, func() bool { return sent.Add(1) <= int64(n) }, http.StatusAccepted, func(c *http.Client) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fnURL, strings.NewReader(`{"n":1}`))
		req.Header.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
		return c.Do(req)
	})
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			return accepted, 0, err
		}
		depth := 0
		for _, s := range st {
			depth += s.Depth
		}
		if depth == 0 {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return accepted, 0, fmt.Errorf("async: %d invocations still queued after 5 minutes", depth)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return accepted, float64(len(accepted.lat)) / time.Since(start).Seconds(), nil
}
