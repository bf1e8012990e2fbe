package k8s_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// loop sends a request through /fn/ every 20 ms (one client, keep-alive, as a user's would) and
// counts the answers check rejects.
type loop struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	failures     []string
	stop         chan struct{}
	done         chan struct{}
}

// startLoop POSTs (not retried by Go's transport on a connection closed under it, unlike a GET).
func startLoop(url string, check func(code int, body string) bool) *loop {
	l := &loop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			code, body := post(url, `{"loop":true}`)
			l.sent.Add(1)
			if !check(code, body) {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.failures) < 10 {
					l.failures = append(l.failures, fmt.Sprintf("%s %d %.200s", time.Now().Format("15:04:05.000"), code, body))
				}
				l.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return l
}

// Stop ends the loop and returns what it sent and how many failed.
func (l *loop) Stop() (sent, failed int64) {
	close(l.stop)
	<-l.done
	return l.sent.Load(), l.failed.Load()
}

func (l *loop) Failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}

// faultRow is one line of the fault table the test prints.
type faultRow struct {
	fault          string
	sent, failed   int64
	recovery, note string
}

func isOK(want string) func(int, string) bool {
	return func(code int, body string) bool { return code == 200 && strings.Contains(body, want) }
}

// pods lists sless's pods of one workload (sless-api, sless-controller), running ones only.
func pods(t *testing.T, workload string) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := cluster.Kube.List(context.Background(), &l, client.InNamespace("sless-system"), client.MatchingLabels{"app.kubernetes.io/name": workload}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func readyReplicas(t *testing.T, name string) int32 {
	d := deployment(t, "sless-system", name)
	if d == nil {
		return 0
	}
	return d.Status.ReadyReplicas
}

// leader is the controller pod holding the Lease (its identity starts with the pod's name).
func leader(t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := cluster.Kube.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: "sless-operator.sless.dev"}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	name, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return name
}

// invocationRows counts a function's rows in the invocation history's PostgreSQL.
func invocationRows(t *testing.T, ns, fn string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cluster.Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM invocations WHERE namespace = $1 AND function = $2", ns, fn).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Faults on the real cluster, one after another while the other e2e tests wait (not parallel):
// sless survives losing any one of its pods and its database with a client loop of requests through
// /fn/ every 20 ms. Prints the fault table.
func TestFaults(t *testing.T) {
	c := tenant(t, subject("faults"))
	ctx := context.Background()
	ns := c.Namespace()
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "ping", Runtime: "python3.11", MinReplicas: 1}); err != nil {
		t.Fatal(err)
	}
	f := deploy(t, c, "ping", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'pong'\n"})
	var table []faultRow
	t.Cleanup(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "\n| fault | requests sent | failed | recovery | note |\n|---|---|---|---|---|\n")
		for _, r := range table {
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s |\n", r.fault, r.sent, r.failed, r.recovery, r.note)
		}
		t.Log(b.String())
	})

	t.Run("delete an API pod", func(t *testing.T) {
		if n := len(pods(t, "sless-api")); n != 2 {
			t.Fatalf("%d sless-api pods, want 2", n)
		}
		served := func(pod string) float64 {
			return podMetricOf(t, pod, "sless_function_requests_total", `function="ping",namespace="`+ns+`"`)
		}
		before := map[string]float64{}
		for _, p := range pods(t, "sless-api") {
			before[p.Name] = served(p.Name)
		}
		l := startLoop(f.Status.URL, isOK("pong"))
		// The victim is the replica the loop's keep-alive connection goes to.
		var victim string
		waitFor(t, "the loop's requests counted on a replica", 30*time.Second, func() bool {
			for p, n := range before {
				if served(p) > n+5 {
					victim = p
					return true
				}
			}
			return false
		})
		start := time.Now()
		kubectl(t, "-n", "sless-system", "delete", "pod", victim, "--wait=false")
		waitFor(t, "a replacement sless-api pod ready", 3*time.Minute, func() bool {
			ps := pods(t, "sless-api")
			return readyReplicas(t, "sless-api") == 2 && len(ps) == 2 && ps[0].Name != victim && ps[1].Name != victim
		})
		recovery := time.Since(start)
		// The loop runs on through the victim's whole drain (preStop, shutdown) until it is gone.
		waitFor(t, "the deleted pod gone", 3*time.Minute, func() bool {
			return apierrors.IsNotFound(cluster.Kube.Get(context.Background(), client.ObjectKey{Namespace: "sless-system", Name: victim}, &corev1.Pod{}))
		})
		gone := time.Since(start)
		time.Sleep(2 * time.Second)
		sent, failed := l.Stop()
		table = append(table, faultRow{"delete one sless-api pod", sent, failed,
			fmt.Sprintf("%.1f s (replacement ready), %.1f s (old pod drained and gone)", recovery.Seconds(), gone.Seconds()), ""})
		if failed != 0 || sent < 50 {
			t.Errorf("%d sent, %d failed: %v", sent, failed, l.Failures())
		}
	})

	t.Run("PostgreSQL stops for 30 s", func(t *testing.T) {
		apiPods := pods(t, "sless-api")
		dropped := func() (n float64) {
			for _, p := range pods(t, "sless-api") {
				n += podMetricOf(t, p.Name, "sless_invocations_dropped_total", "")
			}
			return n
		}
		if len(apiPods) != 2 {
			t.Fatalf("%d sless-api pods", len(apiPods))
		}
		// Counting starts from a quiet function: everything before is written.
		waitFor(t, "earlier records written", 30*time.Second, func() bool {
			return podMetricOf(t, apiPods[0].Name, "sless_invocations_buffered", "")+podMetricOf(t, apiPods[1].Name, "sless_invocations_buffered", "") == 0
		})
		rows0, dropped0 := invocationRows(t, ns, "ping"), dropped()
		l := startLoop(f.Status.URL, isOK("pong"))
		time.Sleep(time.Second)
		if err := cluster.Postgres.Stop(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		// Meanwhile the history answers 503 not_ready (and /fn/ keeps serving).
		var notReady bool
		for time.Since(stopped) < 30*time.Second {
			_, err := c.Invocations(ctx, "ping")
			if ae, ok := errors.AsType[*apiv1.Error](err); ok && ae.Code == apiv1.CodeNotReady {
				notReady = true
			} else if err != nil {
				t.Errorf("GET invocations while PostgreSQL is down: %v", err)
			} else if time.Since(stopped) > 5*time.Second {
				t.Errorf("GET invocations answered 200 %v after PostgreSQL stopped", time.Since(stopped).Round(time.Second))
			}
			time.Sleep(time.Second)
		}
		if err := cluster.Postgres.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		waitFor(t, "the history answering again", time.Minute, func() bool { _, err := c.Invocations(ctx, "ping"); return err == nil })
		recovery := time.Since(started)
		time.Sleep(time.Second)
		sent, failed := l.Stop()
		if !notReady {
			t.Error("GET invocations never answered 503 not_ready while PostgreSQL was down")
		}
		// Every request is written or counted as dropped.
		var rows int64
		var lost float64
		waitFor(t, "the buffered records written", time.Minute, func() bool {
			rows, lost = invocationRows(t, ns, "ping")-rows0, dropped()-dropped0
			return float64(rows)+lost == float64(sent)
		})
		// A request made now is listed.
		if code, _ := get(f.Status.URL); code != 200 {
			t.Errorf("/fn/ after: %d", code)
		}
		waitFor(t, "a new invocation listed", 10*time.Second, func() bool {
			inv, err := c.Invocations(ctx, "ping")
			return err == nil && len(inv) > 0 && time.Since(inv[0].Time) < 5*time.Second
		})
		table = append(table, faultRow{"stop PostgreSQL 30 s under load", sent, failed, fmt.Sprintf("%.1f s (history answers)", recovery.Seconds()),
			fmt.Sprintf("%d rows written, %.0f dropped (counted)", rows, lost)})
		if failed != 0 {
			t.Errorf("%d sent, %d failed: %v", sent, failed, l.Failures())
		}
	})

	t.Run("S3 stops", func(t *testing.T) {
		before, err := c.GetFunction(ctx, "ping")
		if err != nil {
			t.Fatal(err)
		}
		var cr slessv1.Function
		if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ping"}, &cr); err != nil {
			t.Fatal(err)
		}
		specCode := cr.Spec.CodeSHA256
		l := startLoop(f.Status.URL, isOK("pong"))
		z := testenv.Zip(map[string]string{"handler.py": "def handle(event):\n    return 'pong, again'\n"})
		cluster.S3.Stop()
		stopped := time.Now()
		_, err = c.Upload(ctx, "ping", strings.NewReader(string(z)), int64(len(z)))
		answered := time.Since(stopped)
		if ae, ok := errors.AsType[*apiv1.Error](err); !ok || ae.Code != apiv1.CodeNotReady {
			t.Errorf("an upload while S3 is down: %v, want 503 not_ready", err)
		}
		// Nothing half-written: the function still names the old code, which keeps serving.
		if g, err := c.GetFunction(ctx, "ping"); err != nil || g.Status.CodeSHA256 != before.Status.CodeSHA256 || g.Status.Image != before.Status.Image {
			t.Errorf("after the refused upload: %+v %v", g, err)
		}
		if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ping"}, &cr); err != nil || cr.Spec.CodeSHA256 != specCode {
			t.Errorf("the Function's spec.codeSHA256 %s → %s (%v)", specCode, cr.Spec.CodeSHA256, err)
		}
		// …and no object under the new archive's name that a later build could pick up (checked
		// once S3 is back, below).
		newKey := codestore.Key(ns, "ping", fmt.Sprintf("%x", sha256.Sum256(z)))
		time.Sleep(5 * time.Second)
		if err := cluster.S3.Start(); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		if ok, err := cluster.Code.Exists(ctx, newKey); err != nil || ok {
			t.Errorf("after the refused upload the store holds %s: %v %v", newKey, ok, err)
		}
		up, err := c.Upload(ctx, "ping", strings.NewReader(string(z)), int64(len(z)))
		if err != nil {
			t.Fatalf("the same upload after S3 returned: %v", err)
		}
		waitFor(t, "ping Ready on the new code", 3*time.Minute, func() bool {
			g, err := c.GetFunction(ctx, "ping")
			return err == nil && g.Status.CodeSHA256 == up.CodeSHA256 && g.Status.Phase == apiv1.PhaseReady
		})
		ready := time.Since(restarted)
		waitFor(t, "the new code answering", time.Minute, func() bool { _, body := get(f.Status.URL); return strings.Contains(body, "again") })
		sent, failed := l.Stop()
		table = append(table, faultRow{"stop S3, upload", sent, failed, fmt.Sprintf("%.1f s (the upload after S3 returned Ready)", ready.Seconds()),
			fmt.Sprintf("upload answered 503 not_ready in %d ms, code unchanged", answered.Milliseconds())})
		if failed != 0 {
			t.Errorf("%d sent, %d failed: %v", sent, failed, l.Failures())
		}
	})

	t.Run("the registry answers 5xx to pushes for 20 s", func(t *testing.T) {
		l := startLoop(f.Status.URL, isOK("pong"))
		refused0 := cluster.RegistryFaults.Refused()
		cluster.RegistryFaults.FailFor(20 * time.Second)
		start := time.Now()
		z := testenv.Zip(map[string]string{"handler.py": "def handle(event):\n    return 'pong, third'\n"})
		up, err := c.Upload(ctx, "ping", strings.NewReader(string(z)), int64(len(z)))
		if err != nil {
			t.Fatal(err)
		}
		var during []string
		waitFor(t, "ping Ready on the new code after the fault", 3*time.Minute, func() bool {
			g, err := c.GetFunction(ctx, "ping")
			if err != nil || g.Status.CodeSHA256 != up.CodeSHA256 {
				return false
			}
			if g.Status.Phase != apiv1.PhaseReady && len(during) < 3 {
				during = append(during, fmt.Sprintf("%s: %.120s", g.Status.Phase, g.Status.Message))
			}
			return g.Status.Phase == apiv1.PhaseReady
		})
		ready := time.Since(start)
		refused := cluster.RegistryFaults.Refused() - refused0
		waitFor(t, "the new code answering", time.Minute, func() bool { _, body := get(f.Status.URL); return strings.Contains(body, "third") })
		sent, failed := l.Stop()
		t.Logf("status during the fault: %v", during)
		table = append(table, faultRow{"registry 503 to pushes for 20 s", sent, failed, fmt.Sprintf("%.1f s (Ready on the new code)", ready.Seconds()),
			fmt.Sprintf("%d pushes refused, build retried with backoff", refused)})
		if refused == 0 {
			t.Error("no push was refused: the build did not go through the proxy")
		}
		if ready < 20*time.Second {
			t.Errorf("Ready %v after a 20 s push fault began", ready)
		}
		if failed != 0 {
			t.Errorf("%d sent, %d failed: %v", sent, failed, l.Failures())
		}
	})

	t.Run("delete the controller leader during a build", func(t *testing.T) {
		lead := leader(t)
		if lead == "" {
			t.Fatal("no controller leads")
		}
		l := startLoop(f.Status.URL, isOK("pong"))
		// The registry refuses pushes: the leader's build is provably under way (pushing, in its
		// retries) when the leader goes, and only the next leader can finish it.
		refused0 := cluster.RegistryFaults.Refused()
		cluster.RegistryFaults.Fail()
		defer cluster.RegistryFaults.Heal()
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "rebuilt", Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		z := testenv.Zip(map[string]string{"handler.py": "def handle(event):\n    return 'rebuilt'\n"})
		up, err := c.Upload(ctx, "rebuilt", strings.NewReader(string(z)), int64(len(z)))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the leader pushing", time.Minute, func() bool { return cluster.RegistryFaults.Refused() > refused0 })
		killed := time.Now()
		kubectl(t, "-n", "sless-system", "delete", "pod", lead, "--wait=false")
		waitFor(t, "another controller leading", 30*time.Second, func() bool { l := leader(t); return l != "" && l != lead })
		failover := time.Since(killed)
		cluster.RegistryFaults.Heal()
		var g *apiv1.Function
		waitFor(t, "the function Ready on the new code", 3*time.Minute, func() bool {
			g, err = c.GetFunction(ctx, "rebuilt")
			return err == nil && g.Status.CodeSHA256 == up.CodeSHA256 && g.Status.Phase == apiv1.PhaseReady
		})
		ready := time.Since(killed)
		if code, body := get(g.Status.URL); code != 200 || !strings.Contains(body, "rebuilt") {
			t.Errorf("/fn/: %d %s", code, body)
		}
		sent, failed := l.Stop()
		table = append(table, faultRow{"delete the controller leader during a build (its pushes refused)", sent, failed,
			fmt.Sprintf("%.1f s (standby leads), %.1f s (Ready)", failover.Seconds(), ready.Seconds()), "the standby built it"})
		if failed != 0 {
			t.Errorf("%d sent, %d failed: %v", sent, failed, l.Failures())
		}
	})

	t.Run("restart the controller during a scale from zero", func(t *testing.T) {
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "cold", Runtime: "python3.11", IdleTimeoutSec: 5, TimeoutSec: 30}); err != nil {
			t.Fatal(err)
		}
		g := deploy(t, c, "cold", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'warm'\n"})
		waitFor(t, "cold at zero", 2*time.Minute, func() bool {
			d := deployment(t, ns, "cold")
			return d != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0
		})
		// The leader goes first (it releases the Lease as it stops), then the request comes: only
		// the next leader can scale the function up for it.
		lead := leader(t)
		kubectl(t, "-n", "sless-system", "delete", "pod", lead, "--wait=false")
		waitFor(t, "the old leader gone from the Lease", 30*time.Second, func() bool { return leader(t) != lead })
		type answer struct {
			code int
			body string
		}
		answered := make(chan answer, 1)
		sent := time.Now()
		go func() {
			hc := &http.Client{Timeout: 2 * time.Minute}
			resp, err := hc.Get(g.Status.URL)
			if err != nil {
				answered <- answer{0, err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answered <- answer{resp.StatusCode, string(b)}
		}()
		select {
		case a := <-answered:
			took := time.Since(sent)
			// timeout_sec is 30 s, far beyond a failover: a 504 would mean the new leader never scaled.
			ok := a.code == 200 && strings.Contains(a.body, "warm")
			var failed int64
			if !ok {
				failed = 1
				t.Errorf("the held request: %d %s", a.code, a.body)
			}
			table = append(table, faultRow{"restart the controller leader during a scale from zero", 1, failed, fmt.Sprintf("%.1f s (answered %d)", took.Seconds(), a.code), ""})
		case <-time.After(45 * time.Second):
			t.Fatal("the held request was not answered within 45 s (timeout_sec 30)")
		}
	})
}
