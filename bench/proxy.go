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
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/memstore"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/ports"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

type fixedResolver struct{ u *url.URL }

func (r fixedResolver) Resolve(context.Context, string, string) (*url.URL, error) { return r.u, nil }

// benchProxy measures /fn/ against calling the function directly with the same load generator: a
// real python3.11 runtime server (examples/hello-python) on 127.0.0.1, driven by a bounded Go loop.
func benchProxy(ctx context.Context, c config, work string) error {
	fn, direct, err := startHelloPython(ctx)
	if err != nil {
		return err
	}
	defer func() { fn.Process.Kill(); fn.Wait() }()
	proxied, stopAPI, err := startAPI(ctx, work, direct, nil)
	if err != nil {
		return err
	}
	defer stopAPI()

	conc, dur := c.proxyConc, 5*time.Second
	fmt.Printf("\n### /fn/ proxy vs direct (python3.11 runtime serving examples/hello-python, %d concurrent keep-alive clients, 2 × %v per row)\n\n", conc, dur)
	fmt.Println("| setup | path | requests/s | p50 | p99 | errors |")
	fmt.Println("|---|---|---|---|---|---|")
	type outcome struct{ ratio, addedP99, addedP50 float64 }
	measure := func(setup string) (outcome, error) {
		logf("proxy (%s): %d clients, %v per run, direct and through /fn/ alternately", setup, conc, dur)
		var d1, p1, d2, p2 loadResult
		var err error
		if d1, err = load(ctx, direct+"/", conc, dur); err != nil {
			return outcome{}, err
		}
		if p1, err = load(ctx, proxied+"/", conc, dur); err != nil {
			return outcome{}, err
		}
		if d2, err = load(ctx, direct+"/", conc, dur); err != nil {
			return outcome{}, err
		}
		if p2, err = load(ctx, proxied+"/", conc, dur); err != nil {
			return outcome{}, err
		}
		dr, pr := d1.merge(d2), p1.merge(p2)
		for _, row := range []struct {
			name string
			r    loadResult
		}{{"direct to the function", dr}, {"through /fn/ (API proxy)", pr}} {
			fmt.Printf("| %s | %s | %.0f | %d µs | %d µs | %d |\n", setup, row.name, row.r.rps(), row.r.pct(50).Microseconds(), row.r.pct(99).Microseconds(), row.r.errors)
		}
		return outcome{pr.rps() / dr.rps(), (pr.pct(99) - dr.pct(99)).Seconds() * 1000, (pr.pct(50) - dr.pct(50)).Seconds() * 1000}, nil
	}
	shared, err := measure("all on both cores")
	if err != nil {
		return err
	}
	// As deployed, a function has CPU of its own (a container or pod): the function on core 1, the
	// API and the load generator on core 0. The targets are judged on this row.
	if err := pin(fn.Process.Pid, "1"); err != nil {
		return err
	}
	if err := pin(os.Getpid(), "0"); err != nil {
		return err
	}
	pinned, err := measure("function on its own core")
	pin(os.Getpid(), "0,1")
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Println("| target (function on its own core) | measured | verdict | all on both cores |")
	fmt.Println("|---|---|---|---|")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	fmt.Printf("| proxy throughput / direct ≥ 0.8× | %.2f× | %s | %.2f× |\n", pinned.ratio, verdict(pinned.ratio >= 0.8), shared.ratio)
	fmt.Printf("| p99 added by the proxy ≤ 2 ms | %.2f ms (p50 %+.2f ms) | %s | %.2f ms (p50 %+.2f ms) |\n",
		pinned.addedP99, pinned.addedP50, verdict(pinned.addedP99 <= 2), shared.addedP99, shared.addedP50)
	return nil
}

// startHelloPython runs the real python3.11 runtime server serving examples/hello-python on a free
// port of 127.0.0.1 and waits until it answers; the caller kills and waits for it.
func startHelloPython(ctx context.Context) (*exec.Cmd, string, error) {
	root, _ := repoRoot()
	port, err := ports.Free()
	if err != nil {
		return nil, "", err
	}
	fn := exec.CommandContext(ctx, "python3", filepath.Join(root, "runtimes", "python", "server.py"))
	fn.Env = append(os.Environ(), "FUNCTION_DIR="+filepath.Join(root, "examples", "hello-python", "code"),
		fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1")
	fn.Stdout = io.Discard
	if err := fn.Start(); err != nil {
		return nil, "", err
	}
	direct := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(direct+"/health", 15*time.Second); err != nil {
		fn.Process.Kill()
		fn.Wait()
		return nil, "", err
	}
	return fn, direct, nil
}

// startAPI serves the API (memstore backend; inv as its invocation history unless nil) on
// 127.0.0.1 with one Ready function "hello" in namespace bench routed to direct, and returns that
// function's /fn/ URL and what stops the server. Its code store is under work/code.
func startAPI(ctx context.Context, work, direct string, inv objects.Invocations) (string, func(), error) {
	secret := []byte("bench-secret-bench-secret-bench-secret")
	v, _ := auth.New(auth.WithHS256Secret(secret))
	code, _ := codestore.NewDir(filepath.Join(work, "code"))
	u, _ := url.Parse(direct)
	backend, stores := memstore.Backend(code, fixedResolver{u})
	if inv != nil {
		backend.Invocations = inv
	}
	srv, err := api.New(backend, api.WithVerifier(v), api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil))))
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := api.NewHTTPServer("", srv.Handler(), nil)
	go hs.Serve(ln)
	ns := apiv1.NamespaceFor("bench")
	stores.Namespaces.Ensure(ctx, ns)
	stores.Functions.Create(ctx, ns, objects.FunctionSpec{Name: "hello", Runtime: "python3.11"})
	stores.Functions.SetStatus(ns, "hello", func(s *lifecycle.FunctionStatus) { s.Phase = apiv1.PhaseReady })
	return "http://" + ln.Addr().String() + "/fn/" + ns + "/hello", func() { hs.Close() }, nil
}

// pin sets the CPU affinity of every thread of pid (taskset from util-linux).
func pin(pid int, cpus string) error {
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, fmt.Sprint(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset: %v: %s", err, out)
	}
	return nil
}

type loadResult struct {
	lat    []time.Duration
	errors int64
	dur    time.Duration
}

func (l loadResult) merge(o loadResult) loadResult {
	return loadResult{lat: append(slices.Clone(l.lat), o.lat...), errors: l.errors + o.errors, dur: l.dur + o.dur}
}

func (l loadResult) rps() float64 { return float64(len(l.lat)) / l.dur.Seconds() }

func (l loadResult) pct(p int) time.Duration {
	s := slices.Clone(l.lat)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*p/100)]
}

// load runs conc workers against url for d (bounded in time; 127.0.0.1 only).
func load(ctx context.Context, url string, conc int, d time.Duration) (loadResult, error) {
	deadline := time.Now().Add(d)
	r := drive(ctx, conc, func() bool { return time.Now().Before(deadline) }, http.StatusOK,
		func(c *http.Client) (*http.Response, error) { return c.Get(url) })
	return r, ctx.Err()
}

// drive runs conc workers, each sending while more says so; an answer with status want counts its
// latency, anything else is an error.
func drive(ctx context.Context, conc int, more func() bool, want int, send func(*http.Client) (*http.Response, error)) loadResult {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var all []time.Duration
	var errs atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for more() && ctx.Err() == nil {
				s := time.Now()
				resp, err := send(client)
				if err != nil {
					errs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(s))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return loadResult{lat: all, errors: errs.Load(), dur: time.Since(start)}
}

func waitHTTP(u string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %v", u, within)
}
