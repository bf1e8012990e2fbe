package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// benchColdStartUp is the cold-start cycle on the single host (`sless up`): a function at
// min_replicas 0 with idle_timeout_sec 5 has no container once idle; one request through /fn/
// starts one. Split from /fn/'s Server-Timing (the runner reports when it decided to start the
// container): decision, container start (until listed with an address), runtime ready (health
// check passed), first byte.
func benchColdStartUp(ctx context.Context, c config, work, slessBin string) error {
	// The cluster install's windows (hack/k8s/install-sless.sh), so both platforms decide alike.
	cl, stop, err := startSlessUp(ctx, work, slessBin, "coldstart-up-data", "--autoscale-stable-window=10s", "--autoscale-panic-window=2s")
	if err != nil {
		return err
	}
	defer stop()
	const fn = "cold"
	if _, err := createColdFunction(ctx, cl, fn, 10, "def handle(event):\n    return 'ok'\n"); err != nil {
		return err
	}
	ns := cl.Namespace()
	// zero: the API says no instance runs and podman has no container of the namespace running.
	// running: a container of the function runs (a created spare does not count).
	running := func(name string) bool {
		out, err := podmanCmd(ctx, work, "ps", "-q", "--filter", "label=sless.dev/namespace="+ns, "--filter", "label=sless.dev/function="+name).Output()
		return err != nil || strings.TrimSpace(string(out)) != ""
	}
	zero := func() bool {
		f, err := cl.GetFunction(ctx, fn)
		return err == nil && f.Status.Replicas == 0 && !running(fn)
	}
	url := cl.FunctionURL(fn)
	p := &parts{}
	var total []time.Duration
	logf("coldstart-up: %d cold requests through /fn/ on sless up", coldCycles)
	for i := 0; i < coldCycles; i++ {
		deadline := time.Now().Add(3 * time.Minute)
		for !zero() {
			if time.Now().After(deadline) {
				return fmt.Errorf("the function kept a container for 3 minutes after idling (min_replicas 0, idle_timeout_sec 5)")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		time.Sleep(500 * time.Millisecond)
		r, err := coldRequest(ctx, url)
		if err == nil && (r.code != 200 || r.body != "ok") {
			err = fmt.Errorf("cold request: %d %s", r.code, r.body)
		}
		if err != nil {
			return err
		}
		if !r.st.has["sless-hold"] {
			return fmt.Errorf("cold request %d was not held (no Server-Timing sless-hold): the function was not at zero", i+1)
		}
		total = append(total, r.firstByte)
		st := r.st
		line := fmt.Sprintf("  cold %d: %s ms (hold %s", i+1, ms(r.firstByte), ms(st.hold))
		startFrom := time.Duration(0)
		if st.has["sless-decision"] {
			p.add("decision: request → the runner decided to start a container", st.decision)
			startFrom = st.decision
			line += ", decision +" + ms(st.decision)
		}
		if st.has["sless-start"] {
			name := "container start: decision → listed with an address"
			if !st.has["sless-decision"] {
				name = "decision + container start: request → listed with an address"
			}
			p.add(name, st.start-startFrom)
			line += ", listed +" + ms(st.start)
		}
		if st.has["sless-ready"] && st.has["sless-start"] {
			p.add("runtime ready: listed → health check passed", st.ready-st.start)
			line += ", ready +" + ms(st.ready)
		}
		p.add("first byte: granted → response's first byte", r.firstByte-st.hold)
		logf("%s)", line)
	}
	fmt.Printf("\n### Cold start on the single host (`sless up`, podman): no container → first response through /fn/, %d cycles\n\n", coldCycles)
	fmt.Println("python3.11 function returning 'ok', min_replicas 0, idle_timeout_sec 5, `sless up --autoscale-stable-window=10s --autoscale-panic-window=2s`. Client side: a new connection per request, time to the first byte; parts from /fn/'s Server-Timing.")
	fmt.Printf("\n| cold start through /fn/ | p50 ms | p95 ms | min–max ms | n |\n|---|---|---|---|---|\n| **total (client: sent → first byte)** | **%s** | **%s** | %s–%s | %d |\n",
		ms(pct(total, 50)), ms(pct(total, 95)), ms(slices.Min(total)), ms(slices.Max(total)), len(total))
	fmt.Println()
	p.table(coldCycles)
	fmt.Printf("\n| target | measured | verdict |\n|---|---|---|\n| single host cold start p50 ≤ 400 ms | %s ms | %s |\n",
		ms(pct(total, 50)), verdict(pct(total, 50) <= 400*time.Millisecond))

	logf("coldstart-up: ramp from zero to 40 clients for 20 s")
	// The API's status.replicas: the runner's ready containers, written within a second.
	readyNow := func() int32 {
		f, err := cl.GetFunction(ctx, rampFunction)
		if err != nil {
			return 0
		}
		return int32(f.Status.Replicas)
	}
	rp, err := ramp(ctx, cl, func() error {
		deadline := time.Now().Add(3 * time.Minute)
		for readyNow() != 0 || running(rampFunction) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s kept an instance for 3 minutes", rampFunction)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	}, readyNow)
	if err != nil {
		return fmt.Errorf("ramp: %w", err)
	}
	rp.print("on the single host", "containers", "containers ready (status.replicas)")
	return nil
}
