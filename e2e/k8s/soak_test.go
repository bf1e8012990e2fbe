package k8s_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sless-dev/sless/api/apiv1"
)

// soakDuration is how long TestSoak runs: 60 s in make test, SLESS_SOAK_DURATION (10m in make
// bench) otherwise.
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("SLESS_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SLESS_SOAK_DURATION: %v", err)
		}
		return d
	}
	return time.Minute
}

// podMetricOf sums a metric family's series whose labels contain match, from one sless pod.
func podMetricOf(t *testing.T, pod, family, match string) float64 {
	t.Helper()
	out := kubectl(t, "get", "--raw", "/api/v1/namespaces/sless-system/pods/"+pod+":9091/proxy/metrics")
	var sum float64
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, family)
		if !ok || !(strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) || !strings.Contains(rest, match) {
			continue
		}
		fields := strings.Fields(line)
		var v float64
		fmt.Sscan(fields[len(fields)-1], &v)
		sum += v
	}
	return sum
}

// Soak: mixed /fn/ load (a 200, a 500 and a slow handler) through both API replicas for
// soakDuration. No unexpected answer, each sless pod's RSS sampled every 5 s and flat, and the
// invocation history in PostgreSQL holds exactly the requests sent.
func TestSoak(t *testing.T) {
	c := tenant(t, subject("soak"))
	ctx := context.Background()
	ns := c.Namespace()
	type handler struct {
		name, code string
		status     int
		want       string
	}
	handlers := []handler{
		{"ok", "def handle(event):\n    return 'fine'\n", 200, "fine"},
		{"boom", "def handle(event):\n    raise RuntimeError('boom')\n", 500, ""},
		{"slow", "import time\n\ndef handle(event):\n    time.sleep(0.2)\n    return 'late'\n", 200, "late"},
	}
	urls := map[string]string{}
	for _, h := range handlers {
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: h.name, Runtime: "python3.11", MinReplicas: 1, MaxReplicas: 3}); err != nil {
			t.Fatal(err)
		}
		urls[h.name] = deploy(t, c, h.name, "python3.11", map[string]string{"handler.py": h.code}).Status.URL
	}
	apiPods, ctlPods := pods(t, "sless-api"), pods(t, "sless-controller")
	if len(apiPods) != 2 || len(ctlPods) != 2 {
		t.Fatalf("%d API and %d controller pods, want 2 and 2", len(apiPods), len(ctlPods))
	}
	all := append(append([]string{}, names(apiPods)...), names(ctlPods)...)
	rss := map[string][]float64{}
	sample := func() {
		for _, p := range all {
			rss[p] = append(rss[p], podMetricOf(t, p, "process_resident_memory_bytes", "")/(1<<20))
		}
	}

	d := soakDuration(t)
	var sent, unexpected atomic.Int64
	var mu sync.Mutex
	var bad []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Each worker its own connections: kube-proxy spreads them over both replicas; half
			// the workers open one per request, so both replicas surely serve.
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2, DisableKeepAlives: w%2 == 1}}
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := handlers[i%len(handlers)]
				resp, err := hc.Get(urls[h.name])
				sent.Add(1)
				var code int
				var body []byte
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				if err != nil || code != h.status || !strings.Contains(string(body), h.want) {
					unexpected.Add(1)
					mu.Lock()
					if len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("%s: %d %.200s %v", h.name, code, body, err))
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	start := time.Now()
	sample()
	for time.Since(start) < d {
		time.Sleep(5 * time.Second)
		sample()
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("soak %v: %d requests (%.0f/s), %d unexpected", elapsed.Round(time.Second), sent.Load(), float64(sent.Load())/elapsed.Seconds(), unexpected.Load())
	if unexpected.Load() != 0 {
		t.Errorf("%d unexpected answers: %v", unexpected.Load(), bad)
	}
	// Both replicas served.
	for _, p := range apiPods {
		if n := podMetricOf(t, p.Name, "sless_function_requests_total", `namespace="`+ns+`"`); n == 0 {
			t.Errorf("API replica %s served none of the soak's requests", p.Name)
		} else {
			t.Logf("API replica %s served %.0f", p.Name, n)
		}
	}
	// RSS series (MiB), and flat: the second half's peak within 25 % + 16 MiB of the first half's.
	var b strings.Builder
	for _, p := range all {
		s := rss[p]
		fmt.Fprintf(&b, "%s RSS MiB:", p)
		for _, v := range s {
			fmt.Fprintf(&b, " %.0f", v)
		}
		b.WriteString("\n")
		half := len(s) / 2
		if half > 0 && peak(s[half:]) > peak(s[:half])*1.25+16 {
			t.Errorf("%s's RSS grew: %v", p, s)
		}
	}
	t.Log("\n" + b.String())
	// Every request is in PostgreSQL (none dropped: the database was up).
	var rows int64
	waitFor(t, "every request recorded in PostgreSQL", time.Minute, func() bool {
		rows = 0
		for _, h := range handlers {
			rows += invocationRows(t, ns, h.name)
		}
		return rows == sent.Load()
	})
	t.Logf("invocation rows in PostgreSQL: %d = requests sent", rows)
}

func names(ps []corev1.Pod) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func peak(s []float64) float64 {
	m := 0.0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}
