package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
)

// Autoscaling on a single host (issue 16): a real sless up and podman, the decider's windows
// shortened by flags so that "back to zero" takes seconds, not minutes.
func TestAutoscaleUp(t *testing.T) {
	podman := testenv.NewPodman(t)
	dataDir := t.TempDir()
	// 640 MiB: five instances of 128 MiB (max_replicas below), filled up on purpose at the end.
	flags := []string{"--autoscale-stable-window", "6s", "--autoscale-panic-window", "2s", "--tenant-quota-memory", "640Mi"}
	u := startUp(t, dataDir, "", "", flags...)
	listen, regAddr := u.Listen, u.RegAddr
	outer := t
	ctx := context.Background()
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "0", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})
	// running is the function's running containers, name → id.
	running := func(name string) map[string]string {
		out, _ := podman.Command(ctx, "ps", "--filter", "label=sless.dev/function="+name, "--filter", "label=sless.dev/namespace="+ns,
			"--filter", "status=running", "--format", "{{.Names}} {{.ID}}").Output()
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if n, id, ok := strings.Cut(l, " "); ok {
				m[n] = id
			}
		}
		return m
	}
	create := func(f apiv1.Function, handler string) {
		t.Helper()
		if _, err := u.c.CreateFunction(ctx, f); err != nil {
			t.Fatal(err)
		}
		if f := u.deploy(t, f.Name, "python3.11", map[string]string{"handler.py": handler}); f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("%s: %+v", f.Name, f.Status)
		}
	}
	status := func(name string) apiv1.FunctionStatus {
		f, err := u.c.GetFunction(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return f.Status
	}
	const sleeper = "import time\ndef handle(event):\n    time.sleep(0.1)\n    return {'slept': event['path']}\n"
	create(apiv1.Function{Name: "sleeper", Runtime: "python3.11", MinReplicas: 0, MaxReplicas: 5, Concurrency: 2, IdleTimeoutSec: 5}, sleeper)

	t.Run("idle goes to zero", func(t *testing.T) {
		waitFor(t, 40*time.Second, func() bool { return len(running("sleeper")) == 0 }, "the idle function to have no container")
		waitFor(t, 3*time.Second, func() bool { s := status("sleeper"); return s.Replicas == 0 && s.DesiredReplicas == 0 }, "status at zero")
		if s := status("sleeper"); s.Phase != apiv1.PhaseReady {
			t.Errorf("at zero the function is still Ready: %+v", s)
		}
	})

	t.Run("a cold request answers", func(t *testing.T) {
		// At zero the next instance waits created, not running: the cold start is its podman start.
		var spare string
		waitFor(t, 5*time.Second, func() bool {
			out, _ := podman.Command(ctx, "ps", "-a", "--filter", "label=sless.dev/function=sleeper", "--filter", "label=sless.dev/namespace="+ns,
				"--filter", "status=created", "--format", "{{.Names}} {{.ID}}").Output()
			spare = strings.TrimSpace(string(out))
			return spare != "" && !strings.Contains(spare, "\n")
		}, "one created spare container at zero")
		start := time.Now()
		resp, err := http.Get(u.url + "/fn/" + ns + "/sleeper/cold")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"slept": "/cold"`) {
			t.Fatalf("cold request: %d %s\n%s", resp.StatusCode, body, u.logTail())
		}
		t.Logf("cold start through /fn/: %v, Server-Timing: %q", time.Since(start).Round(time.Millisecond), resp.Header.Get("Server-Timing"))
		now := running("sleeper")
		if len(now) != 1 {
			t.Errorf("one request at zero started %d containers, want 1", len(now))
		}
		if name, id, _ := strings.Cut(spare, " "); now[name] != id {
			t.Errorf("the cold start did not start the spare %s: running %v", spare, now)
		}
		waitFor(t, 2*time.Second, func() bool { return status("sleeper").Replicas == 1 }, "status.replicas 1 within 2 s")
	})

	var scaled map[string]string
	t.Run("40 clients scale out with no failed request", func(t *testing.T) {
		var ok, failed atomic.Int64
		var mu sync.Mutex
		var codes []string
		peak := 0
		stop := make(chan struct{})
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		// The bridge's MAC must not follow its ports: containers that joined before the scale-out
		// would keep sending their replies to an address the bridge dropped (answers lost, 504).
		bridge := bridgeOf(t, dataDir)
		mac := linkAddress(t, bridge)
		defer func() {
			if now := linkAddress(t, bridge); now != mac {
				t.Errorf("bridge %s changed its address under the scale-out: %s → %s", bridge, mac, now)
			}
		}()
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := client.Get(fmt.Sprintf("%s/fn/%s/sleeper/c%d", u.url, ns, i))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 == 2 {
						ok.Add(1)
					} else {
						failed.Add(1)
						mu.Lock()
						codes = append(codes, resp.Status)
						mu.Unlock()
					}
				}
			}()
		}
		deadline := time.Now().Add(12 * time.Second)
		for time.Now().Before(deadline) {
			if n := len(running("sleeper")); n > peak {
				peak = n
			}
			time.Sleep(200 * time.Millisecond)
		}
		scaled = running("sleeper")
		close(stop)
		wg.Wait()
		t.Logf("40 clients for 12 s: %d ok, %d failed, peak %d containers, %d at the end", ok.Load(), failed.Load(), peak, len(scaled))
		if failed.Load() != 0 {
			t.Errorf("%d requests failed: %v\n%s", failed.Load(), codes[:min(len(codes), 10)], u.LogWithout(`"status":200`))
			out, _ := podman.Command(ctx, "ps", "-a", "--filter", "label=sless.dev/namespace="+ns, "--format", "{{.Names}} {{.ID}} {{.State}} {{.Status}}").Output()
			t.Logf("containers:\n%s", out)
			for name := range running("sleeper") {
				ip, _ := podman.Command(ctx, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name).Output()
				addr := strings.TrimSpace(string(ip))
				c := &http.Client{Timeout: 2 * time.Second}
				resp, err := c.Get("http://" + addr + ":8080/health")
				if err == nil {
					resp.Body.Close()
					t.Logf("%s %s: health %d", name, addr, resp.StatusCode)
				} else {
					t.Logf("%s %s: health %v", name, addr, err)
				}
				logs, _ := podman.Command(ctx, "logs", "--tail", "5", name).CombinedOutput()
				t.Logf("%s logs: %s", name, logs)
			}
			files, _ := exec.Command("sh", "-c", "grep -r . "+dataDir+"/cni/ipam/ 2>&1 | head -40").CombinedOutput()
			t.Logf("ipam:\n%s", files)
			// The confinement chain's counters: a reply dropped as "to the host" shows here.
			chains, _ := exec.Command("sh", "-c", "iptables -w -t mangle -S | grep -o 'SLESS-[A-Z0-9]*' | sort -u | xargs -rI{} iptables -w -t mangle -L {} -v -n -x").CombinedOutput()
			t.Logf("firewall:\n%s", chains)
		}
		if peak < 3 || peak > 5 {
			t.Errorf("peak %d containers, want 3–5 (concurrency 2, max_replicas 5)", peak)
		}
		if s := status("sleeper"); s.DesiredReplicas < 3 || s.DesiredReplicas > 5 || s.Replicas < 3 {
			t.Errorf("status under load %+v", s)
		}
	})

	t.Run("a restart keeps the scale", func(t *testing.T) {
		if len(scaled) < 3 {
			t.Fatalf("nothing to keep: %d containers after the load (the subtest before failed)", len(scaled))
		}
		u.stop()
		u = startUp(outer, dataDir, listen, regAddr, flags...)
		waitFor(t, 10*time.Second, func() bool { return status("sleeper").Replicas == len(scaled) }, "the adopted instances in status")
		if t.Failed() {
			t.Log(u.LogWithout(`"msg":"request"`))
		}
		now := running("sleeper")
		for name, id := range scaled {
			if now[name] != id {
				t.Errorf("container %s: %s after the restart, was %s (adopted, not restarted or stopped)", name, now[name], id)
			}
		}
		if len(now) != len(scaled) {
			t.Errorf("after the restart %d containers, before %d", len(now), len(scaled))
		}
	})

	t.Run("back to min_replicas after the idle timeout", func(t *testing.T) {
		waitFor(t, 40*time.Second, func() bool { return len(running("sleeper")) == 0 }, "zero containers after the load")
		waitFor(t, 3*time.Second, func() bool { s := status("sleeper"); return s.Replicas == 0 && !s.ScaleLimited }, "status.replicas 0, no longer limited")
	})

	t.Run("hold queue full is 429 throttled", func(t *testing.T) {
		create(apiv1.Function{Name: "slow", Runtime: "python3.11", MaxReplicas: 1, Concurrency: 1, TimeoutSec: 10},
			"import time\ndef handle(event):\n    time.sleep(3)\n    return {}\n")
		// One in flight, 100 held (--max-held's default): the rest are refused at once.
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		var throttled *http.Response
		var throttledBody []byte
		for range 130 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Get(u.url + "/fn/" + ns + "/slow")
				if err != nil {
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				if resp.StatusCode == 429 {
					throttled, throttledBody = resp, body
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[429] == 0 || throttled == nil {
			t.Fatalf("130 requests at a function of 1 instance × concurrency 1 with 100 held at most: %v, want some 429", codes)
		}
		var e struct{ Error apiv1.Error }
		json.Unmarshal(throttledBody, &e)
		if e.Error.Code != apiv1.CodeThrottled || throttled.Header.Get("Retry-After") == "" {
			t.Errorf("429: %s Retry-After %q", throttledBody, throttled.Header.Get("Retry-After"))
		}
		if n := len(running("slow")); n != 1 {
			t.Errorf("max_replicas 1: %d containers", n)
		}
		t.Logf("codes: %v", codes)
	})

	t.Run("disabled answers 503 at once", func(t *testing.T) {
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "sleeper-web", Type: "http", FunctionRef: "sleeper"}); err != nil {
			t.Fatal(err)
		}
		if _, err := u.c.SetTriggerEnabled(ctx, "sleeper-web", false); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, body := u.get("/fn/" + ns + "/sleeper")
		if code != 503 || !strings.Contains(body, "disabled by trigger sleeper-web") || time.Since(start) > time.Second {
			t.Errorf("disabled: %d %s after %v", code, body, time.Since(start))
		}
		if n := len(running("sleeper")); n != 0 {
			t.Errorf("a disabled function started %d containers", n)
		}
	})

	t.Run("a quota that leaves no room is 429 at once", func(t *testing.T) {
		if _, err := u.c.SetTriggerEnabled(ctx, "sleeper-web", true); err != nil {
			t.Fatal(err)
		}
		// slow (128 MiB, up until its idle timeout) and hog (512 MiB) fill the 640.
		create(apiv1.Function{Name: "hog", Runtime: "python3.11", MemoryMB: 512, MinReplicas: 1}, "def handle(event):\n    return {}\n")
		// Held while the start is tried; answered once the quota refused it, not at its timeout.
		short := &http.Client{Timeout: 5 * time.Second}
		held := time.Now()
		resp, err := short.Get(u.url + "/fn/" + ns + "/sleeper")
		if err != nil {
			t.Fatalf("the held request when the quota refuses the start: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 {
			t.Fatalf("the held request when the quota refuses the start: %d, want 429", resp.StatusCode)
		}
		t.Logf("held request answered 429 after %v", time.Since(held).Round(time.Millisecond))
		waitFor(t, 3*time.Second, func() bool { return status("sleeper").ScaleLimited }, "scale_limited in the status")
		start := time.Now()
		code, body := u.get("/fn/" + ns + "/sleeper")
		if code != 429 || !strings.Contains(body, "throttled") || !strings.Contains(body, "quota") || time.Since(start) > time.Second {
			t.Errorf("at zero with the quota full: %d %s after %v, want 429 throttled naming the quota at once", code, body, time.Since(start))
		}
		// The details are the tenant's, in the status; /fn/ is public.
		if strings.Contains(body, ns) || strings.Contains(body, "MiB") {
			t.Errorf("the public 429 tells the namespace's usage: %s", body)
		}
		if s := status("sleeper"); !strings.Contains(s.Message, "--tenant-quota-memory") {
			t.Errorf("status while limited: %+v", s)
		} else if err := lifecycletest.WroteWire(lifecycletest.ScaleLimited, s); err != nil {
			t.Error(err)
		}
		if err := u.c.DeleteFunction(ctx, "hog"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, func() bool { return !status("sleeper").ScaleLimited }, "the limit to clear once memory is free")
		if err := lifecycletest.WroteWire(lifecycletest.Scaled, status("sleeper")); err != nil {
			t.Error(err)
		}
		if code, body := u.get("/fn/" + ns + "/sleeper/again"); code != 200 || !strings.Contains(body, "/again") {
			t.Errorf("after the quota freed: %d %s", code, body)
		}
	})

	t.Run("a crashed instance is replaced", func(t *testing.T) {
		create(apiv1.Function{Name: "steady", Runtime: "python3.11", MinReplicas: 2}, "def handle(event):\n    return {'ok': 1}\n")
		waitFor(t, 20*time.Second, func() bool { return len(running("steady")) == 2 && status("steady").Replicas == 2 }, "min_replicas 2 running")
		var victim string
		for name := range running("steady") {
			victim = name
			break
		}
		// Killed from outside (as the kernel's OOM killer would): podman reports it exited.
		if out, err := podman.Command(ctx, "kill", victim).CombinedOutput(); err != nil {
			t.Fatalf("kill: %v %s", err, out)
		}
		failed := 0
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if code, _ := u.get("/fn/" + ns + "/steady"); code != 200 {
				failed++
			}
			if r := running("steady"); len(r) == 2 && r[victim] == "" && status("steady").Replicas == 2 {
				break
			}
		}
		if r := running("steady"); len(r) != 2 || r[victim] != "" {
			t.Fatalf("after a crash: running %v, want two and not %s\n%s", r, victim, u.LogWithout(`"status":200`))
		}
		if failed > 1 {
			t.Errorf("%d requests failed while the crashed instance was replaced", failed)
		}
	})
}

// bridgeOf is the functions network's bridge of the sless up in dataDir (its CNI configuration).
func bridgeOf(t *testing.T, dataDir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "cni", "*.conflist"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Name    string
			Plugins []struct{ Bridge string }
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(c.Name, "-deps") && len(c.Plugins) > 0 {
			return c.Plugins[0].Bridge
		}
	}
	t.Fatalf("no functions network in %s/cni: %v", dataDir, files)
	return ""
}

func linkAddress(t *testing.T, link string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + link + "/address")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
