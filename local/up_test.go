package local_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/lifecycle/lifecycletest"
)

// up is a real `sless up` process (internal/testenv) with the helpers these tests use.
type up struct {
	*testenv.SlessUp
	c       *client.Client
	token   string
	url     string
	dataDir string
}

func startUp(t *testing.T, dataDir, listen, regAddr string, extra ...string) *up {
	t.Helper()
	s := testenv.StartSlessUp(t, dataDir, listen, regAddr, extra...)
	return &up{SlessUp: s, c: s.Client, token: s.Token, url: s.URL, dataDir: dataDir}
}

func (u *up) logTail() string               { return u.LogTail() }
func (u *up) stop()                         { u.Stop() }
func (u *up) get(path string) (int, string) { return u.Get(path) }

// deploy creates (if needed) and uploads, then waits until the function is Ready or Failed.
func (u *up) deploy(t *testing.T, name, runtime string, files map[string]string) *apiv1.Function {
	t.Helper()
	ctx := context.Background()
	if _, err := u.c.GetFunction(ctx, name); client.IsNotFound(err) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: name, Runtime: runtime, EnvVars: map[string]string{"GREETING": "hi"}}); err != nil {
			t.Fatal(err)
		}
	}
	z := testenv.Zip(files)
	res, err := u.c.Upload(ctx, name, bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	return u.waitCode(t, name, res.CodeSHA256)
}

func (u *up) waitCode(t *testing.T, name, sha string) *apiv1.Function {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		f, err := u.c.GetFunction(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if f.Status.CodeSHA256 == sha && (f.Status.Phase == apiv1.PhaseReady || f.Status.Phase == apiv1.PhaseFailed) && f.Status.Message == "" || f.Status.Phase == apiv1.PhaseFailed {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 90 s: %+v\n%s", name, f.Status, u.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const pyHello = "import os\ndef handle(event):\n    return {'v': 1, 'greeting': os.environ.get('GREETING'), 'path': event['path']}\n"

func TestSlessUp(t *testing.T) {
	podman := testenv.NewPodman(t)
	dataDir := t.TempDir()
	u := startUp(t, dataDir, "", "")
	listen, regAddr := u.Listen, u.RegAddr
	outer := t // the restarted process must outlive the subtest that restarts it
	ctx := context.Background()
	ns := u.c.Namespace()
	fnPath := func(name string) string { return "/fn/" + ns + "/" + name }
	containersOf := func(name string) []string {
		out, _ := podman.Command(ctx, "ps", "--filter", "label=sless.dev/function="+name, "--filter", "label=sless.dev/namespace="+ns, "--format", "{{.Names}}").Output()
		return strings.Fields(string(out))
	}
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "1", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})

	t.Run("deploy python and node", func(t *testing.T) {
		f := u.deploy(t, "py", "python3.11", map[string]string{"handler.py": pyHello})
		if f.Status.Phase != apiv1.PhaseReady || !strings.Contains(f.Status.Image, "@sha256:") || f.Status.Build == nil ||
			f.Status.URL != u.url+fnPath("py") || f.Status.LastBuiltAt == nil {
			t.Fatalf("status %+v", f.Status)
		}
		// The status moved through package lifecycle, as on Kubernetes (operator/controllers).
		if err := lifecycletest.WroteWire(lifecycletest.Ready, f.Status); err != nil {
			t.Error(err)
		}
		if code, body := u.get(fnPath("py") + "/x"); code != 200 || !strings.Contains(body, `"greeting": "hi"`) || !strings.Contains(body, `"path": "/x"`) {
			t.Errorf("python: %d %s", code, body)
		}
		u.deploy(t, "js", "nodejs20", map[string]string{"handler.js": "exports.handle = async (e) => ({ node: process.version, env: process.env.GREETING })\n"})
		if code, body := u.get(fnPath("js")); code != 200 || !strings.Contains(body, `"node":"v20.`) || !strings.Contains(body, `"env":"hi"`) {
			t.Errorf("node: %d %s", code, body)
		}
		// Both builds are counted on /metrics (the build pipeline observes them).
		if code, m := u.Metrics(""); code != 200 || !strings.Contains(m, `sless_builds_total{result="succeeded"} 2`) ||
			!strings.Contains(m, `sless_build_duration_seconds_count{result="succeeded"} 2`) {
			t.Errorf("build metrics after two builds: %d\n%s", code, grepLines(m, "sless_build"))
		}
		cs := containersOf("py")
		if len(cs) != 1 || !strings.HasPrefix(cs[0], "sless-"+ns+"-py-") {
			t.Errorf("containers %v", cs)
		}
		if mem := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", cs[0], "--format", "{{.HostConfig.Memory}}")))); mem != "134217728" {
			t.Errorf("memory limit %s, want memory_mb 128 = 134217728", mem)
		}
		// Nor on podman's command line (every process of the host sees it) or in the container's
		// config: they reach the runtime in a file only the function's user can read.
		if env := string(mustOutput(t, podman.Command(ctx, "inspect", cs[0], "--format", "{{.Config.Env}}"))); strings.Contains(env, "GREETING") ||
			!strings.Contains(env, "SLESS_ENV_FILE=") {
			t.Errorf("the container's config holds the user's variables: %s", env)
		}
		// The user's env vars are not in the image: they are set at run time.
		if strings.Contains(string(mustOutput(t, podman.Command(ctx, "image", "inspect", f.Status.Image, "--format", "{{.Config.Env}}"))), "GREETING") {
			t.Error("env vars were baked into the image")
		}
	})

	// Tenant code runs confined as on Kubernetes (restricted): no capabilities, no privilege
	// escalation, a read-only root with a writable /tmp, a bound on processes.
	t.Run("a function runs confined", func(t *testing.T) {
		probe := "import os\n" +
			"def status(k):\n" +
			"    return [l.split()[1] for l in open('/proc/self/status') if l.startswith(k + ':')][0]\n" +
			"def writable(p):\n" +
			"    try:\n" +
			"        open(p, 'w').close(); return True\n" +
			"    except OSError:\n" +
			"        return False\n" +
			"def rootfs():\n" +
			"    return [l.split()[3].split(',')[0] for l in open('/proc/self/mounts') if l.split()[1] == '/'][-1]\n" +
			"def handle(event):\n" +
			"    return {'uid': os.getuid(), 'capbnd': status('CapBnd'), 'nnp': status('NoNewPrivs'),\n" +
			"            'rootfs': rootfs(), 'tmp': writable('/tmp/probe')}\n"
		u.deploy(t, "probe", "python3.11", map[string]string{"handler.py": probe})
		code, body := u.get(fnPath("probe"))
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%d %s", code, body)
		}
		// (A non-root process has no effective capabilities anyway: the bounding set shows the drop.)
		want := map[string]any{"uid": float64(65532), "capbnd": "0000000000000000", "nnp": "1", "rootfs": "ro", "tmp": true}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
			}
		}
		cs := containersOf("probe")
		if pids := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", cs[0], "--format", "{{.HostConfig.PidsLimit}}")))); pids != "256" {
			t.Errorf("pids limit %s, want 256", pids)
		}
	})

	// A handler tries the registry the platform runs, as an attacker would: every request without
	// a token is refused (or, once the function has its own network, never arrives), the token
	// endpoint gives nothing without credentials, and the victim keeps its image.
	t.Run("a function cannot use the registry", func(t *testing.T) {
		before, err := u.c.GetFunction(ctx, "py")
		if err != nil {
			t.Fatal(err)
		}
		u.deploy(t, "attacker", "python3.11", map[string]string{"handler.py": testenv.RegistryAttack})
		code, body := u.get(fnPath("attacker") + "?reg=" + regAddr + "&victim=" + ns + "/py")
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		testenv.CheckRegistryAttack(t, body)
		after, _ := u.c.GetFunction(ctx, "py")
		if after.Status.Image != before.Status.Image {
			t.Errorf("the victim's image changed: %s → %s", before.Status.Image, after.Status.Image)
		}
		if err := u.c.DeleteFunction(ctx, "attacker"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("update under load has no failed request", func(t *testing.T) {
		before, err := u.c.GetFunction(ctx, "py")
		if err != nil {
			t.Fatal(err)
		}
		var ok, failed, sawNew atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					code, body := u.get(fnPath("py"))
					if code != 200 {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", code, body))
						continue
					}
					ok.Add(1)
					if strings.Contains(body, `"v": 2`) {
						sawNew.Add(1)
					}
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		f := u.deploy(t, "py", "python3.11", map[string]string{"handler.py": strings.Replace(pyHello, "'v': 1", "'v': 2", 1)})
		deadline := time.Now().Add(5 * time.Second)
		for sawNew.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // keep loading past the removal of the old container
		close(stop)
		wg.Wait()
		t.Logf("during the update: %d requests answered, %d failed, %d by the new code", ok.Load(), failed.Load(), sawNew.Load())
		if f.Status.Phase != apiv1.PhaseReady || failed.Load() != 0 || sawNew.Load() == 0 {
			t.Errorf("phase %s: %d ok, %d failed (first: %v), %d answered by the new code", f.Status.Phase, ok.Load(), failed.Load(), firstErr.Load(), sawNew.Load())
		}
		// The old container is removed after the switch (it first finishes what it serves).
		waitFor(t, 15*time.Second, func() bool { return len(containersOf("py")) == 1 }, "the old container to be removed")
		// The earlier version's image is deleted from the registry once the new one serves.
		manifest := func(image string) int {
			ref, err := name.ParseReference(image)
			if err != nil {
				t.Fatal(err)
			}
			_, err = remote.Head(ref, u.RegOpts()...)
			var te *transport.Error
			if errors.As(err, &te) {
				return te.StatusCode
			} else if err != nil {
				t.Fatal(err)
			}
			return 200
		}
		if code := manifest(before.Status.Image); code != 404 {
			t.Errorf("the earlier version's image %s: %d", before.Status.Image, code)
		}
		if code := manifest(f.Status.Image); code != 200 {
			t.Errorf("the serving image %s: %d", f.Status.Image, code)
		}
	})

	t.Run("a handler that fails to load", func(t *testing.T) {
		f := u.deploy(t, "py", "python3.11", map[string]string{"handler.py": "def handle(event)\n    return 1\n"})
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "SyntaxError") {
			t.Errorf("status %+v", f.Status)
		}
		if code, body := u.get(fnPath("py")); code != 200 || !strings.Contains(body, `"v": 2`) {
			t.Errorf("after a failed update the previous version must keep serving: %d %s", code, body)
		}
		u.deploy(t, "py", "python3.11", map[string]string{"handler.py": strings.Replace(pyHello, "'v': 1", "'v': 3", 1)})
		if code, body := u.get(fnPath("py")); code != 200 || !strings.Contains(body, `"v": 3`) {
			t.Errorf("fixed: %d %s", code, body)
		}
	})

	t.Run("a slow start shows Starting", func(t *testing.T) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "slow", Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		// The runtime imports the handler before it listens: 4 s of Starting.
		z := testenv.Zip(map[string]string{"handler.py": "import time\ntime.sleep(4)\ndef handle(e):\n    return 1\n"})
		res, err := u.c.Upload(ctx, "slow", bytes.NewReader(z), int64(len(z)))
		if err != nil {
			t.Fatal(err)
		}
		var f *apiv1.Function
		waitFor(t, 60*time.Second, func() bool {
			f, _ = u.c.GetFunction(ctx, "slow")
			c := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
			return c != nil && c.Reason == apiv1.ReasonStarting && f.Status.CodeSHA256 == res.CodeSHA256
		}, "Starting")
		if err := lifecycletest.WroteWire(lifecycletest.Starting, f.Status); err != nil {
			t.Error(err)
		}
		if f := u.waitCode(t, "slow", res.CodeSHA256); f.Status.Phase != apiv1.PhaseReady {
			t.Errorf("after the slow start: %+v", f.Status)
		}
		if err := u.c.DeleteFunction(ctx, "slow"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a function without code waits for it", func(t *testing.T) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "nocode", Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		var f *apiv1.Function
		waitFor(t, 10*time.Second, func() bool {
			f, _ = u.c.GetFunction(ctx, "nocode")
			c := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
			return c != nil && c.Reason == apiv1.ReasonPending
		}, "the controller's Pending")
		if err := lifecycletest.WroteWire(lifecycletest.WaitingForCode, f.Status); err != nil {
			t.Error(err)
		}
		if err := u.c.DeleteFunction(ctx, "nocode"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("disable and enable", func(t *testing.T) {
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "py-web", Type: "http", FunctionRef: "py"}); err != nil {
			t.Fatal(err)
		}
		if _, err := u.c.SetTriggerEnabled(ctx, "py-web", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, func() bool { return len(containersOf("py")) == 0 }, "the container to stop")
		var f *apiv1.Function
		waitFor(t, 10*time.Second, func() bool {
			f, _ = u.c.GetFunction(ctx, "py")
			c := apiv1.FindCondition(f.Status.Conditions, apiv1.ConditionReady)
			return c != nil && c.Reason == apiv1.ReasonDisabled
		}, "the Disabled condition")
		if err := lifecycletest.WroteWire(lifecycletest.Disabled, f.Status); err != nil || f.Status.Message != "stopped: disabled by trigger py-web" {
			t.Errorf("disabled: %+v: %v", f.Status, err)
		}
		code, body := u.get(fnPath("py"))
		if code != 503 || !strings.Contains(body, "not_ready") || !strings.Contains(body, "disabled by trigger py-web") {
			t.Errorf("disabled: %d %s", code, body)
		}
		u.c.SetTriggerEnabled(ctx, "py-web", true)
		waitFor(t, 30*time.Second, func() bool { c, _ := u.get(fnPath("py")); return c == 200 }, "the function to serve again")
	})

	t.Run("job runs and re-runs", func(t *testing.T) {
		u.deploy(t, "summer", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return {'sum': sum(event['input'])}\n"})
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "summer", EventJSON: `{"input":[100,200,300]}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		j := waitJob(t, u, "sum", 1)
		if j.Status.Phase != apiv1.JobSucceeded || !strings.Contains(j.Status.Message, `"sum": 600`) || j.Status.CompletionTime == nil {
			t.Fatalf("job %+v", j.Status)
		}
		if _, err := u.c.PutJob(ctx, apiv1.Job{Name: "sum", FunctionRef: "summer", EventJSON: `{"input":[1,2]}`, RunID: 2}); err != nil {
			t.Fatal(err)
		}
		if j = waitJob(t, u, "sum", 2); j.Status.Phase != apiv1.JobSucceeded || !strings.Contains(j.Status.Message, `"sum": 3`) {
			t.Errorf("re-run %+v", j.Status)
		}
		if j, _ := u.c.CreateJob(ctx, apiv1.Job{Name: "never", FunctionRef: "summer", RunID: 0}); j == nil || j.Status.Phase != apiv1.JobSkipped {
			t.Errorf("run_id 0: %+v", j)
		}
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "fails", FunctionRef: "summer", EventJSON: `{"nope":1}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, u, "fails", 1); j.Status.Phase != apiv1.JobFailed || !strings.Contains(j.Status.Message, "KeyError") {
			t.Errorf("failing job %+v", j.Status)
		}
	})

	// Tenant code writes the job's result: it must not make the host read a host file into the
	// job's status (a symlink in the result's place) or hang sless up (a FIFO there).
	t.Run("a job's result cannot read the host or hang it", func(t *testing.T) {
		canary := filepath.Join(t.TempDir(), "host-secret")
		if err := os.WriteFile(canary, []byte("CANARY-host-secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		handler := "import os, sys\n" +
			"def handle(event):\n" +
			"    p = os.environ['TERMINATION_LOG']\n" +
			"    if os.path.lexists(p): os.remove(p)\n" +
			"    if event['attack'] == 'symlink': os.symlink(event['target'], p)\n" +
			"    else: os.mkfifo(p)\n" +
			"    sys.stdout.flush()\n" +
			"    os._exit(0)\n"
		u.deploy(t, "evil", "python3.11", map[string]string{"handler.py": handler})
		for _, attack := range []string{"symlink", "fifo"} {
			ev := fmt.Sprintf(`{"attack":%q,"target":%q}`, attack, canary)
			if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "evil-" + attack, FunctionRef: "evil", EventJSON: ev, RunID: 1}); err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, u, "evil-"+attack, 1)
			if strings.Contains(j.Status.Message, "CANARY") || !strings.Contains(j.Status.Message, "not a regular file") {
				t.Errorf("%s in the result's place: job %+v", attack, j.Status)
			}
		}
	})

	t.Run("cron fires on the injected clock", func(t *testing.T) {
		u.deploy(t, "ticker", "python3.11", map[string]string{"handler.py": "def handle(event):\n    print('tick', event)\n    return {'source': event['source'], 'at': event['scheduled_time']}\n"})
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "every5", Type: "cron", FunctionRef: "ticker", Schedule: "*/5 * * * *"}); err != nil {
			t.Fatal(err)
		}
		setClock(t, u, time.Now()) // the scheduler sees the trigger first at "now"
		boundary := time.Now().UTC().Truncate(5 * time.Minute).Add(5 * time.Minute)
		setClock(t, u, boundary.Add(30*time.Second))
		var tr *apiv1.Trigger
		waitFor(t, 30*time.Second, func() bool {
			inv, _ := u.c.Invocations(ctx, "ticker")
			tr, _ = u.c.GetTrigger(ctx, "every5")
			return len(inv) == 1 && inv[0].Status == 200 && strings.HasPrefix(inv[0].RequestID, "cron-every5-")
		}, "the cron run to be recorded")
		if tr.Status.LastScheduleTime == nil || !tr.Status.LastScheduleTime.Equal(boundary) {
			t.Errorf("last_schedule_time %v, want %v", tr.Status.LastScheduleTime, boundary)
		}
		// The same time again does not fire twice: a pass at a later second of that minute starts
		// nothing, and the next scheduled time does fire. A second run for the first time would
		// have been recorded before the next one (runs of one trigger never overlap).
		setClock(t, u, boundary.Add(40*time.Second))
		next := boundary.Add(5 * time.Minute)
		setClock(t, u, next.Add(10*time.Second))
		var inv []apiv1.Invocation
		waitFor(t, 30*time.Second, func() bool {
			inv, _ = u.c.Invocations(ctx, "ticker")
			return len(inv) > 0 && inv[0].RequestID == fmt.Sprintf("cron-every5-%d", next.Unix())
		}, "the run of the next scheduled time")
		if len(inv) != 2 || inv[1].RequestID != fmt.Sprintf("cron-every5-%d", boundary.Unix()) {
			t.Errorf("runs %+v, want one for %s and one for %s", inv, boundary, next)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		before, _ := u.c.GetFunction(ctx, "py")
		code := uploadRaw(t, u, u.token, "py", testenv.Zip(map[string]string{"../../escape.py": "x"}))
		if code != 400 {
			t.Errorf("zip slip: %d", code)
		}
		secret := make([]byte, 32)
		other, _ := auth.IssueHS256(secret, "dev", time.Hour)
		if code := uploadRaw(t, u, other, "py", testenv.Zip(map[string]string{"handler.py": "x"})); code != 401 {
			t.Errorf("forged token: %d", code)
		}
		mallory, _ := auth.IssueHS256(devSecret(t, u), "mallory", time.Hour)
		if code := uploadRaw(t, u, mallory, "py", testenv.Zip(map[string]string{"handler.py": "x"})); code != 404 {
			t.Errorf("another tenant: %d", code)
		}
		after, _ := u.c.GetFunction(ctx, "py")
		if after.Status.CodeSHA256 != before.Status.CodeSHA256 || after.Status.Image != before.Status.Image {
			t.Errorf("function changed: %+v -> %+v", before.Status, after.Status)
		}
	})

	t.Run("restart restores everything", func(t *testing.T) {
		before := containersOf("py")
		py, _ := u.c.GetFunction(ctx, "py")
		u.stop()
		// An orphan of this instance (its function no longer exists) and a container of another
		// instance: the restart removes the first and leaves the second alone.
		sum := sha256.Sum256([]byte(dataDir))
		inst := hex.EncodeToString(sum[:])[:12]
		for _, c := range []struct{ name, instance string }{{"sless-test-orphan", inst}, {"sless-test-foreign", "0123456789ab"}} {
			args := append([]string{"run", "-d", "--name", c.name, "--label", "sless.dev/instance=" + c.instance, "--label", "sless.dev/role=function",
				"--label", "sless.dev/namespace=" + ns, "--label", "sless.dev/function=ghost"}, testenv.PodmanRunFlags...)
			args = append(args, "--entrypoint", "sleep", py.Status.Image, "300")
			if out, err := podman.Command(ctx, args...).CombinedOutput(); err != nil {
				t.Fatalf("starting %s: %v %s", c.name, err, out)
			}
		}
		defer podman.Command(context.Background(), "rm", "-f", "-t", "0", "sless-test-foreign").Run()
		if cs := containersOf("py"); len(cs) != 1 || cs[0] != before[0] {
			t.Fatalf("containers after stop: %v (before %v): they must keep running", cs, before)
		}
		u = startUp(outer, dataDir, listen, regAddr)
		waitFor(t, 30*time.Second, func() bool { c, b := u.get(fnPath("py")); return c == 200 && strings.Contains(b, `"v": 3`) }, "py after restart")
		if cs := containersOf("py"); len(cs) != 1 || cs[0] != before[0] {
			t.Errorf("containers after restart: %v, want the adopted %v", cs, before)
		}
		if c, _ := u.get(fnPath("js")); c != 200 {
			t.Errorf("js after restart: %d", c)
		}
		ghosts := strings.Fields(string(mustOutput(t, podman.Command(ctx, "ps", "-a", "--filter", "label=sless.dev/function=ghost", "--format", "{{.Names}}"))))
		if len(ghosts) != 1 || ghosts[0] != "sless-test-foreign" {
			t.Errorf("after restart the ghost containers are %v; want only the other instance's", ghosts)
		}
		if j, _ := u.c.GetJob(ctx, "sum"); j == nil || j.Status.LastRunID != 2 {
			t.Errorf("job after restart: %+v", j)
		}
		if tr, _ := u.c.GetTrigger(ctx, "every5"); tr == nil || tr.Status.LastScheduleTime == nil {
			t.Errorf("trigger after restart: %+v", tr)
		}
		if inv, _ := u.c.Invocations(ctx, "ticker"); len(inv) != 2 {
			t.Errorf("invocations after restart: %v, want the two cron runs", inv)
		}
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		f, _ := u.c.GetFunction(ctx, "js")
		if err := u.c.DeleteFunction(ctx, "js"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, func() bool { return len(containersOf("js")) == 0 }, "the js container to go")
		ref, err := name.ParseReference(f.Status.Image)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			_, err := remote.Head(ref, u.RegOpts()...)
			var te *transport.Error
			return errors.As(err, &te) && te.StatusCode == 404
		}, "the image to be deleted from the registry")
		if entries, _ := os.ReadDir(filepath.Join(dataDir, "code", "code", ns, "js")); len(entries) != 0 {
			t.Errorf("stored code left: %v", entries)
		}
		if c, _ := u.get(fnPath("js")); c != 404 {
			t.Errorf("/fn/ after delete: %d", c)
		}
	})
	u.stop()
}

func mustOutput(t *testing.T, cmd *exec.Cmd) []byte {
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitJob(t *testing.T, u *up, name string, runID int64) *apiv1.Job {
	t.Helper()
	var j *apiv1.Job
	waitFor(t, 60*time.Second, func() bool {
		j, _ = u.c.GetJob(context.Background(), name)
		return j != nil && j.Status.LastRunID == runID && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed)
	}, "job "+name)
	return j
}

func setClock(t *testing.T, u *up, at time.Time) {
	t.Helper()
	resp, err := http.Post(u.url+"/debug/clock?time="+at.UTC().Format(time.RFC3339), "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("setting the clock: %v %v", err, resp)
	}
	resp.Body.Close()
}

func uploadRaw(t *testing.T, u *up, token, name string, z []byte) int {
	req, _ := http.NewRequest("POST", u.url+"/v1/namespaces/"+u.c.Namespace()+"/functions/"+name+"/upload", bytes.NewReader(z))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/zip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// otherTenant is an API client of another user (subject sub), its namespace ensured.
func otherTenant(t *testing.T, u *up, sub string) *client.Client {
	t.Helper()
	token, _ := auth.IssueHS256(devSecret(t, u), sub, time.Hour)
	c, err := client.New(u.url, token)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNamespace(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func devSecret(t *testing.T, u *up) []byte {
	b, err := os.ReadFile(filepath.Join(u.dataDir, "dev-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
