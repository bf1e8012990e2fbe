package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/testenv"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/consumer"
	"github.com/sless-dev/sless/operator/resources"
)

// fnServer stands in for the API: it checks the event token of ns, records the message ids of
// function f sent to /fn/ (answering 200, or 422 to a body "bad") and sums the delivery reports.
type fnServer struct {
	mu       sync.Mutex
	ids      map[string]int
	bad      int // requests without the right token
	want     string
	reported apiv1.DeliveryReport
}

func (s *fnServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rep apiv1.DeliveryReport
	report := strings.HasPrefix(r.URL.Path, "/events/")
	var body []byte
	if report {
		json.NewDecoder(r.Body).Decode(&rep)
	} else {
		body, _ = io.ReadAll(r.Body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Header.Get(apiv1.HeaderEventToken) != s.want {
		s.bad++
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if report {
		s.reported.Acked += rep.Acked
		s.reported.Retried += rep.Retried
		s.reported.DeadLettered += rep.DeadLettered
		s.reported.DeadLetters = append(s.reported.DeadLetters, rep.DeadLetters...)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.ids[r.Header.Get(apiv1.HeaderEventMessageID)]++
	if string(body) == "bad" {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}
}

func (s *fnServer) report() apiv1.DeliveryReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reported
}

func (s *fnServer) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// The consumer pod's process on a real kube-apiserver, as the consumer's own service account
// (the Role the controller gives it), against a real broker: a trigger whose secret is missing
// reports so in its status while another trigger of the namespace consumes; the secret appearing
// (the kubelet writing the file) starts it; messages reach /fn/ with the namespace's token; the
// counts are written to the status and go on from there after a restart (a new pod); a disabled
// trigger stops and says it is not connected.
func TestRunnerOnKubernetes(t *testing.T) {
	mq := testenv.StartRabbitMQ(t)
	env := kubetest.Start(t)
	admin := env.Client
	ctx := context.Background()
	ns := "sless-c0ffee00000000a1"
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		resources.MakeConsumerServiceAccount(ns), resources.MakeConsumerRole(ns), resources.MakeConsumerRoleBinding(ns)} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := []byte("the install's event key, 32 bytes.")
	fn := &fnServer{ids: map[string]int{}, want: apiv1.EventToken(key, ns)}
	api := httptest.NewServer(fn)
	t.Cleanup(api.Close)
	dir := t.TempDir()
	secrets, token := filepath.Join(dir, "secrets"), filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(apiv1.EventToken(key, ns)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeSecret := func(secret, k, v string) {
		t.Helper()
		os.MkdirAll(filepath.Join(secrets, secret), 0o700)
		if err := os.WriteFile(filepath.Join(secrets, secret, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSecret("mq", "url", mq.URL()+"\n")

	run := func() (stop func()) {
		mgr, err := ctrl.NewManager(env.ServiceAccount(t, ns, resources.ConsumerName), ctrl.Options{Scheme: env.Scheme,
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
			Controller: config.Controller{SkipNameValidation: ptr(true)}})
		if err != nil {
			t.Fatal(err)
		}
		r := &consumer.Runner{Client: mgr.GetClient(), Namespace: ns, APIURL: api.URL, TokenFile: token, SecretsDir: secrets,
			ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { mgr.Start(mctx); close(done) }()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}
	create := func(name, secret string) {
		t.Helper()
		if err := admin.Create(ctx, &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: slessv1.TriggerSpec{
			Type: apiv1.TriggerRabbitMQ, FunctionRef: "f",
			RabbitMQ: &slessv1.RabbitMQTrigger{URLSecret: secret, Queue: name, DeadLetter: name + ".dlq", Prefetch: 10, RetryBackoffMS: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string, what string, cond func(slessv1.TriggerStatus) bool) slessv1.TriggerStatus {
		t.Helper()
		var tr slessv1.Trigger
		deadline := time.Now().Add(time.Minute)
		for {
			if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tr); err == nil && cond(tr.Status) {
				t.Logf("%s: %s", time.Now().Format("15:04:05.000"), what)
				return tr.Status
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v", what, tr.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	publish := func(queue string, from, n int) {
		t.Helper()
		var msgs []amqp.Publishing
		for i := from; i < from+n; i++ {
			msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("%s-%d", queue, i), Body: []byte("x")})
		}
		mq.Publish(t, queue, msgs...)
	}

	stop := run()
	create("orders", "mq/url")
	create("later", "late/url")
	st := status("later", "the missing secret reported", func(s slessv1.TriggerStatus) bool { return s.LastError != "" && !s.Connected })
	if !strings.Contains(st.LastError, `secret "late"`) {
		t.Errorf("last error %q: want it to name the secret", st.LastError)
	}
	status("orders", "orders connected beside it", func(s slessv1.TriggerStatus) bool { return s.Connected })
	publish("orders", 0, 20)
	status("orders", "20 delivered", func(s slessv1.TriggerStatus) bool { return s.DeliveredTotal == 20 && s.InFlight == 0 })
	for i := range 20 {
		if n := fn.count(fmt.Sprintf("orders-%d", i)); n != 1 {
			t.Errorf("orders-%d reached /fn/ %d times", i, n)
		}
	}
	// The function's own 4xx: dead-lettered at once. The API hears of every outcome in the pod's
	// reports (its metrics and the function's DeadLettered events).
	mq.Publish(t, "orders", amqp.Publishing{MessageId: "poison", Body: []byte("bad")})
	status("orders", "the refused message dead-lettered", func(s slessv1.TriggerStatus) bool { return s.DeadLetteredTotal == 1 })
	deadline := time.Now().Add(4 * consumer.ReportEvery)
	for rep := fn.report(); rep.Acked != 20 || rep.DeadLettered != 1; rep = fn.report() {
		if time.Now().After(deadline) {
			t.Fatalf("reported %+v, want 20 acked and 1 dead-lettered", rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := fn.report().DeadLetters; len(d) != 1 || d[0].MessageID != "poison" || d[0].Queue != "orders.dlq" || !strings.Contains(d[0].Reason, "422") {
		t.Errorf("reported dead letters %+v", d)
	}
	// The secret appears (the kubelet updates the projected volume): the next reconnect reads it.
	writeSecret("late", "url", mq.URL())
	status("later", "the late secret picked up", func(s slessv1.TriggerStatus) bool { return s.Connected && s.LastError == "" })

	// A new pod goes on from the counts its predecessor wrote.
	stop()
	status("orders", "disconnected when its pod stops", func(s slessv1.TriggerStatus) bool { return !s.Connected })
	publish("orders", 20, 5)
	run()
	status("orders", "25 delivered over two pods", func(s slessv1.TriggerStatus) bool { return s.DeliveredTotal == 25 && s.Connected })

	// Disabled: stops, says so, and leaves the messages queued.
	var tr slessv1.Trigger
	admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, &tr)
	no := false
	tr.Spec.Enabled = &no
	if err := admin.Update(ctx, &tr); err != nil {
		t.Fatal(err)
	}
	status("orders", "disabled: not connected", func(s slessv1.TriggerStatus) bool { return !s.Connected })
	waitQueue(t, mq, "orders", func(q amqp.Queue) bool { return q.Consumers == 0 })
	publish("orders", 25, 3)
	if q := mq.Queue(t, "orders"); q.Messages != 3 {
		t.Errorf("a disabled trigger's queue holds %d messages, want 3", q.Messages)
	}
	if fn.bad != 0 {
		t.Errorf("%d requests without the namespace's token", fn.bad)
	}
}

func waitQueue(t *testing.T, mq *testenv.RabbitMQ, name string, cond func(amqp.Queue) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(mq.Queue(t, name)) {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: %+v", name, mq.Queue(t, name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }
