package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/ports"
)

// benchUp measures the single-host platform: a one-line change uploaded through the API until the
// new code answers on /fn/, split into the in-process build, the container start with its health
// check, and the switch; and the first request a freshly switched container serves.
func benchUp(ctx context.Context, c config, work, slessBin string) error {
	cl, stop, err := startSlessUp(ctx, work, slessBin, "up-data")
	if err != nil {
		return err
	}
	defer stop()
	if _, err := cl.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11"}); err != nil {
		return err
	}
	fnURL := cl.FunctionURL("hello")
	code := func(i int) []byte {
		return zipOf(map[string]string{"handler.py": fmt.Sprintf("def handle(event):\n    return {'version': %d}\n", i)})
	}
	type run struct{ total, build, start, first, steady time.Duration }
	var runs []run
	n := 6
	logf("sless up: %d one-line changes through the API (the first warms podman's storage and is not counted)", n)
	for i := 0; i < n; i++ {
		z := code(i)
		want := fmt.Sprintf(`{"version": %d}`, i)
		t0 := time.Now()
		up, err := cl.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z)))
		if err != nil {
			return err
		}
		var f *apiv1.Function
		var ready time.Time
		for {
			if f, err = cl.GetFunction(ctx, "hello"); err != nil {
				return err
			}
			if f.Status.CodeSHA256 == up.CodeSHA256 && f.Status.Phase == apiv1.PhaseReady && f.Status.Message == "" {
				ready = time.Now()
				break
			}
			if f.Status.Phase == apiv1.PhaseFailed {
				return fmt.Errorf("deploy failed: %s", f.Status.Message)
			}
			if time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("not ready after 2 minutes: %+v", f.Status)
			}
			time.Sleep(2 * time.Millisecond)
		}
		var first time.Duration
		for {
			s := time.Now()
			resp, err := http.Get(fnURL)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.TrimSpace(string(b)) == want {
				first = time.Since(s)
				break
			}
			if time.Since(t0) > 2*time.Minute {
				return fmt.Errorf("new code never answered: %s", b)
			}
		}
		total := time.Since(t0)
		var lat []time.Duration
		for k := 0; k < 100; k++ {
			s := time.Now()
			resp, err := http.Get(fnURL)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat = append(lat, time.Since(s))
		}
		slices.Sort(lat)
		build := time.Duration(f.Status.Build.DurationMS) * time.Millisecond
		r := run{total: total, build: build, start: ready.Sub(t0) - build, first: first, steady: lat[50]}
		if i > 0 {
			runs = append(runs, r)
		}
		logf("  change %d: %d ms (build %d ms)", i, total.Milliseconds(), build.Milliseconds())
	}
	med := func(get func(run) time.Duration) string {
		s := &series{}
		for _, r := range runs {
			s.ds = append(s.ds, get(r))
		}
		return s.summary()
	}
	fmt.Printf("\n### sless up: one-line change → new response on /fn/ (python3.11, %d changes)\n\n", len(runs))
	fmt.Println("| step | median ms (min–max, n) |")
	fmt.Println("|---|---|")
	fmt.Printf("| upload → new response on /fn/ (end to end, client side) | %s |\n", med(func(r run) time.Duration { return r.total }))
	fmt.Printf("| of which: in-process build + push (status.build.duration_ms) | %s |\n", med(func(r run) time.Duration { return r.build }))
	fmt.Printf("| of which: upload, container start (podman run) and health check, until Ready | %s |\n", med(func(r run) time.Duration { return r.start }))
	fmt.Printf("| first request to the new container | %s |\n", med(func(r run) time.Duration { return r.first }))
	fmt.Printf("| steady-state request after it (p50 of 100) | %s |\n", med(func(r run) time.Duration { return r.steady }))
	s := &series{}
	for _, r := range runs {
		s.ds = append(s.ds, r.total)
	}
	v := "met"
	if s.median() > 2*time.Second {
		v = "**missed**"
	}
	fmt.Printf("\n| target | measured | verdict |\n|---|---|---|\n| upload → new response ≤ 2 s | %s ms | %s |\n", ms(s.median()), v)
	return nil
}

// startSlessUp runs `sless up` on a fresh data dir and free ports and returns a client for it.
func startSlessUp(ctx context.Context, work, slessBin, name string, extra ...string) (*client.Client, func(), error) {
	data := filepath.Join(work, name)
	listen, err := ports.Free()
	if err != nil {
		return nil, nil, err
	}
	reg, err := ports.Free()
	if err != nil {
		return nil, nil, err
	}
	metrics, err := ports.Free()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, slessBin, "up", "--quiet", "--data-dir", data, "--listen", fmt.Sprintf("127.0.0.1:%d", listen),
		"--registry-listen", fmt.Sprintf("127.0.0.1:%d", reg), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metrics), "--bases-script", "",
		"--podman-root", filepath.Join(cacheDir(), "podman"), "--bases-dir", filepath.Join(cacheDir(), "bases"))
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	var cl *client.Client
	// Function containers outlive sless up by design: `sless down` removes this instance's (by its
	// data dir). Not every container of the namespace: the dev user's namespace is the same on
	// every instance, and tests on the same podman storage have theirs running.
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		exec.Command(slessBin, "down", "--data-dir", data, "--podman-root", filepath.Join(cacheDir(), "podman")).Run()
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", listen)
	if err := waitHTTP(base+"/readyz", 120*time.Second); err != nil {
		stop()
		return nil, nil, err
	}
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err == nil {
		cl, err = client.New(base, strings.TrimSpace(string(tok)))
	}
	if err == nil {
		err = cl.EnsureNamespace(ctx)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return cl, stop, nil
}
