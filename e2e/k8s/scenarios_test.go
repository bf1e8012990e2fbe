package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
)

// deploy creates (or updates) a function from files through the REST API and waits until it is
// Ready on this code.
func deploy(t *testing.T, c *apiclient.Client, fn, runtime string, files map[string]string) *apiv1.Function {
	t.Helper()
	return deployUntil(t, c, fn, runtime, files, apiv1.PhaseReady)
}

// deployUntil creates (if needed) and uploads, then waits for phase on the new code (Ready or
// Failed; the other one fails the test).
func deployUntil(t *testing.T, c *apiclient.Client, fn, runtime string, files map[string]string, phase apiv1.Phase) *apiv1.Function {
	t.Helper()
	ctx := context.Background()
	if _, err := c.GetFunction(ctx, fn); apiclient.IsNotFound(err) {
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: fn, Runtime: runtime}); err != nil {
			t.Fatal(err)
		}
	}
	z := testenv.Zip(files)
	up, err := c.Upload(ctx, fn, strings.NewReader(string(z)), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	var f *apiv1.Function
	waitFor(t, fmt.Sprintf("%s %s on the new code", fn, phase), 3*time.Minute, func() bool {
		f, err = c.GetFunction(ctx, fn)
		if err != nil || f.Status.CodeSHA256 != up.CodeSHA256 {
			return false
		}
		if f.Status.Phase != phase && (f.Status.Phase == apiv1.PhaseFailed || f.Status.Phase == apiv1.PhaseReady) {
			t.Fatalf("%s %s: %s", fn, f.Status.Phase, f.Status.Message)
		}
		return f.Status.Phase == phase
	})
	return f
}

func deployment(t *testing.T, ns, name string) *appsv1.Deployment {
	var d appsv1.Deployment
	if err := cluster.Kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		return nil
	}
	return &d
}

// A code change rolls out a new digest while a request loop runs: not one request fails.
func TestCodeChangeRollsOutWithoutFailedRequests(t *testing.T) {
	t.Parallel()
	d := example(t, "hello-python", subject("rollout"))
	out := d.apply()
	ns := apiv1.NamespaceFor(d.subject)
	before := deployment(t, ns, "hello-python").Spec.Template.Spec.Containers[0].Image

	var ok, failed, sawNew atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			code, body := get(out["url"] + "?name=loop")
			switch {
			case code == 200 && strings.Contains(body, "howdy, loop"):
				sawNew.Add(1)
				ok.Add(1)
			case code == 200 && strings.Contains(body, "hello, loop"):
				ok.Add(1)
			default:
				failed.Add(1)
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%d %s", code, body))
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	d.write("code/handler.py", strings.Replace(readFile(t, d.dir+"/code/handler.py"), `f"hello, {name}"`, `f"howdy, {name}"`, 1))
	start := time.Now()
	d.apply()
	// apply returns when the Function is Ready: the new code answers from then on.
	if code, body := get(out["url"] + "?name=after"); code != 200 || !strings.Contains(body, "howdy, after") {
		t.Errorf("right after apply returned: %d %s", code, body)
	}
	waitFor(t, "the new code answering", time.Minute, func() bool { return sawNew.Load() > 0 })
	t.Logf("apply of a one-line change → new response through /fn/: %.2f s", time.Since(start).Seconds())
	time.Sleep(2 * time.Second) // the old pod goes away meanwhile
	close(stop)
	wg.Wait()
	after := deployment(t, ns, "hello-python").Spec.Template.Spec.Containers[0].Image
	if after == before || !strings.Contains(after, "@sha256:") {
		t.Errorf("deployment image %s → %s", before, after)
	}
	t.Logf("%d requests during the rollout, %d failed", ok.Load()+failed.Load(), failed.Load())
	if failed.Load() != 0 || ok.Load() < 20 {
		t.Errorf("%d ok, %d failed: %v", ok.Load(), failed.Load(), failures)
	}
}

// npm dependencies: the deps Job really runs in a pod (it downloads from the package mirror on
// the bridge address; pods cannot reach the internet), the layer lands in the cache, the function
// uses the package; a second function with the same lockfile starts no Job.
func TestDependenciesInstalledByAJobInAPod(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("deps"))
	ns := c.Namespace()
	pj, lock := cluster.NPM.Manifests("fn", "leftpad-sless")
	files := map[string]string{"package.json": pj, "package-lock.json": lock,
		"handler.js": "const pad = require('leftpad-sless');\nexports.handle = async () => ({ padded: pad(42, 6) });\n"}
	tarballs := cluster.NPM.Tarballs.Load()
	var sawJob atomic.Bool
	stop := make(chan struct{})
	go func() { // the Job is removed once its layer is used: watch for it while the build waits
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var jobs batchv1.JobList
			cluster.Kube.List(context.Background(), &jobs, client.InNamespace(ns), client.MatchingLabels{"sless.dev/role": "deps"})
			if len(jobs.Items) > 0 {
				sawJob.Store(true)
			}
		}
	}()
	f := deploy(t, c, "pad", "nodejs20", files)
	close(stop)
	if f.Status.Build == nil || f.Status.Build.DepsKey == "" || f.Status.Build.DepsCached {
		t.Errorf("build %+v", f.Status.Build)
	}
	if !sawJob.Load() || cluster.NPM.Tarballs.Load() == tarballs {
		t.Errorf("no deps Job ran in a pod (job seen %v, tarball downloads %d → %d)", sawJob.Load(), tarballs, cluster.NPM.Tarballs.Load())
	}
	// The installer went through the index proxy (in a controller pod), not to the registry.
	var ops corev1.PodList
	cluster.Kube.List(context.Background(), &ops, client.InNamespace("sless-system"), client.MatchingLabels{"app.kubernetes.io/name": "sless-controller"})
	from, _ := cluster.NPM.LastTarballClient.Load().(string)
	if !slices.ContainsFunc(ops.Items, func(p corev1.Pod) bool { return p.Status.PodIP == from }) {
		t.Errorf("the tarball was fetched from %s, not through the index proxy in a controller pod (%d pods)", from, len(ops.Items))
	}
	if code, body := get(f.Status.URL); code != 200 || !strings.Contains(body, `"padded":"000042"`) {
		t.Fatalf("/fn/: %d %s", code, body)
	}
	tarballs = cluster.NPM.Tarballs.Load()
	files["handler.js"] = "const pad = require('leftpad-sless');\nexports.handle = async () => ({ padded: pad(7, 3) });\n"
	g := deploy(t, c, "pad2", "nodejs20", files)
	if g.Status.Build == nil || !g.Status.Build.DepsCached || g.Status.Build.DepsKey != f.Status.Build.DepsKey || cluster.NPM.Tarballs.Load() != tarballs {
		t.Errorf("same lockfile: build %+v, tarball downloads %d → %d", g.Status.Build, tarballs, cluster.NPM.Tarballs.Load())
	}
	var evs corev1.EventList
	cluster.Kube.List(context.Background(), &evs, client.InNamespace(ns))
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == "pad2" && e.Reason == "InstallingDependencies" {
			t.Errorf("pad2 started a deps Job: %s", e.Message)
		}
	}
	if code, body := get(g.Status.URL); code != 200 || !strings.Contains(body, `"padded":"007"`) {
		t.Errorf("/fn/ pad2: %d %s", code, body)
	}
}

// The seed's job: {"input":[100,200,300]} → 600, read from the pod's termination message.
func TestJobResultFromTerminationMessage(t *testing.T) {
	t.Parallel()
	d := example(t, "job", subject("job"))
	out := d.apply()
	var res map[string]any
	if err := json.Unmarshal([]byte(out["job_result"]), &res); err != nil || res["sum"] != float64(600) {
		t.Fatalf("job_result %q, want {\"sum\":600}", out["job_result"])
	}
	ns := apiv1.NamespaceFor(d.subject)
	var pods corev1.PodList
	cluster.Kube.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"sless.dev/role": "job"})
	found := false
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil && strings.Contains(cs.State.Terminated.Message, "600") {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no job pod with 600 in its termination message (%d pods)", len(pods.Items))
	}
}

// A cron trigger */1 fires on the next minute and its run is recorded.
func TestCronTriggerFires(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("cron"))
	ctx := context.Background()
	deploy(t, c, "tick", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return event\n"})
	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "every-minute", Type: "cron", FunctionRef: "tick", Schedule: "*/1 * * * *"}); err != nil {
		t.Fatal(err)
	}
	var run batchv1.Job
	waitFor(t, "a run of the cron trigger", 150*time.Second, func() bool {
		tr, err := c.GetTrigger(ctx, "every-minute")
		if err != nil || tr.Status.LastScheduleTime == nil {
			return false
		}
		var jobs batchv1.JobList
		cluster.Kube.List(ctx, &jobs, client.InNamespace(c.Namespace()), client.MatchingLabels{"sless.dev/role": "cron"})
		for _, j := range jobs.Items {
			if j.Status.Succeeded > 0 {
				run = j
				return true
			}
		}
		return false
	})
	// The event the run got is the run contract's (runspec.CronEvent): with the scheduled time of
	// this run, which the CronJob's template alone cannot know.
	var pods corev1.PodList
	cluster.Kube.List(ctx, &pods, client.InNamespace(c.Namespace()), client.MatchingLabels{"batch.kubernetes.io/job-name": run.Name})
	msg := ""
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				msg = cs.State.Terminated.Message
			}
		}
	}
	var ev map[string]string
	if err := json.Unmarshal([]byte(msg), &ev); err != nil {
		t.Fatalf("the run's result %q: %v", msg, err)
	}
	scheduled, err := time.Parse(time.RFC3339, ev["scheduled_time"])
	if err != nil || ev["source"] != "cron" || ev["trigger"] != "every-minute" {
		t.Fatalf("cron event %v: %v", ev, err)
	}
	if want := run.Annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]; want != "" {
		if w, _ := time.Parse(time.RFC3339, want); !w.Equal(scheduled) {
			t.Errorf("scheduled_time %s, the CronJob scheduled the run at %s", scheduled, want)
		}
	}
	if scheduled.Second() != 0 || time.Since(scheduled) > 5*time.Minute || time.Until(scheduled) > time.Minute {
		t.Errorf("scheduled_time %s is not a recent minute", scheduled)
	}
	t.Logf("cron event %v", ev)
}

// An http trigger disabled scales the function to zero and /fn/ answers 503; enabled, it is back.
func TestHTTPTriggerDisableAndEnable(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("toggle"))
	ctx := context.Background()
	f := deploy(t, c, "web", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'up'\n"})
	if _, err := c.CreateTrigger(ctx, apiv1.Trigger{Name: "web-http", Type: "http", FunctionRef: "web"}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(f.Status.URL); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if _, err := c.SetTriggerEnabled(ctx, "web-http", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replicas 0", time.Minute, func() bool {
		d := deployment(t, c.Namespace(), "web")
		return d != nil && *d.Spec.Replicas == 0 && d.Status.Replicas == 0
	})
	if code, body := get(f.Status.URL); code != http.StatusServiceUnavailable {
		t.Errorf("disabled: %d %s", code, body)
	}
	if _, err := c.SetTriggerEnabled(ctx, "web-http", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/fn/ answering again", time.Minute, func() bool { code, _ := get(f.Status.URL); return code == 200 })
}

// Function pods run restricted: non-root, no privilege escalation, the code read-only.
func TestPodsRunRestricted(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("restricted"))
	deploy(t, c, "probe", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'ok'\n"})
	var pods corev1.PodList
	cluster.Kube.List(context.Background(), &pods, client.InNamespace(c.Namespace()), client.MatchingLabels{"sless.dev/function": "probe"})
	if len(pods.Items) == 0 {
		t.Fatal("no pod")
	}
	out := kubectl(t, "exec", "-n", c.Namespace(), pods.Items[0].Name, "--", "python3", "-c", `
import os
print("uid", os.getuid())
print([l for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0].strip())
print([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].strip())
try:
    open("/app/function/handler.py", "a"); print("code writable")
except OSError as e:
    print("code read-only:", e.strerror)
`)
	for _, want := range []string{"uid 65532", "NoNewPrivs:\t1", "CapEff:\t0000000000000000", "code read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("pod lacks %q:\n%s", want, out)
		}
	}
}

// terraform destroy: Deployment, Service, image and stored code are gone.
func TestDestroyRemovesEverything(t *testing.T) {
	t.Parallel()
	d := example(t, "hello-python", subject("destroy"))
	out := d.apply()
	ns := apiv1.NamespaceFor(d.subject)
	c, _ := apiclient.New(cluster.Endpoint, token(t, d.subject))
	f, err := c.GetFunction(context.Background(), "hello-python")
	if err != nil {
		t.Fatal(err)
	}
	d.run("destroy", "-auto-approve", "-input=false", "-no-color")
	waitFor(t, "the Deployment and Service gone", time.Minute, func() bool {
		var svc corev1.Service
		return deployment(t, ns, "hello-python") == nil &&
			client.IgnoreNotFound(cluster.Kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "hello-python"}, &svc)) == nil && svc.Name == ""
	})
	ref, _ := name.NewDigest(out["image"])
	var te *transport.Error
	if _, err := remote.Head(ref, remote.WithAuth(cluster.RegistryAuth)); !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
		t.Errorf("image %s still in the registry (%v)", out["image"], err)
	}
	if ok, err := cluster.Code.Exists(context.Background(), codestore.Key(ns, "hello-python", f.Status.CodeSHA256)); ok || err != nil {
		t.Errorf("stored code still there (%v)", err)
	}
}
