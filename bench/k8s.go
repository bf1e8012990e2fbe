package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/k1n"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// benchK8s measures the production path on the real single-node cluster (hack/k8s): `terraform
// apply` of a one-line change until the new code answers through /fn/, split into the operator's
// in-process build, the rollout and the proxy switch; the first request after a deploy; and, in
// the same run and cluster, the same change the way the seed system made it: a kaniko Job
// building FROM the runtime image + COPY, then a rollout of the Deployment to its image.
func benchK8s(ctx context.Context, c config, work string, cluster func() (*k1n.Env, error)) error {
	env, err := cluster()
	if err != nil {
		return err
	}
	root, _ := repoRoot()
	tok, err := env.Token("bench-k8s@bench.test")
	if err != nil {
		return err
	}
	cl, err := apiclient.New(env.Endpoint, tok)
	if err != nil {
		return err
	}
	if err := cl.EnsureNamespace(ctx); err != nil {
		return err
	}
	ns := cl.Namespace()
	defer env.Kube.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	tf, err := newTerraform(ctx, work, "k8s-hello", env.Endpoint, tok)
	if err != nil {
		return err
	}
	if _, err := tf.run(ctx, "apply", "-auto-approve", "-input=false"); err != nil {
		return err
	}
	defer tf.run(ctx, "destroy", "-auto-approve", "-input=false")
	url := cl.FunctionURL("hello-python")

	// The first request after a deploy: a fresh function, Ready, called once.
	first := &series{}
	for i := 0; i < 3; i++ {
		fn := fmt.Sprintf("first-%d", i)
		if _, err := cl.CreateFunction(ctx, apiv1.Function{Name: fn, Runtime: "python3.11"}); err != nil {
			return err
		}
		z := zipOf(map[string]string{"handler.py": "def handle(event):\n    return 'first'\n"})
		if _, err := cl.Upload(ctx, fn, strings.NewReader(string(z)), int64(len(z))); err != nil {
			return err
		}
		if _, err := waitReady(ctx, cl, fn); err != nil {
			return err
		}
		s := time.Now()
		if code, body := httpGet(cl.FunctionURL(fn)); code != 200 {
			return fmt.Errorf("first request: %d %s", code, body)
		}
		first.ds = append(first.ds, time.Since(s))
		cl.DeleteFunction(ctx, fn)
	}

	handler := filepath.Join(tf.dir, "code", "handler.py")
	orig, _ := os.ReadFile(handler)
	total, upload, build, rollout, switchD, apply := &series{}, &series{}, &series{}, &series{}, &series{}, &series{}
	n := 5
	logf("k8s: %d terraform applies of a one-line change", n)
	for i := 0; i < n; i++ {
		marker := fmt.Sprintf("k8s-bench-%d", i)
		os.WriteFile(handler, []byte(strings.Replace(string(orig), "hello, ", marker+", ", 1)), 0o644)
		var before slessv1.Function
		if err := env.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello-python"}, &before); err != nil {
			return err
		}
		var uploadAt, builtAt, readyAt, newAt atomic.Int64
		stop := make(chan struct{})
		go func() { // what the operator did, as it becomes visible
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				var f slessv1.Function
				if env.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello-python"}, &f) != nil {
					continue
				}
				if f.Spec.CodeSHA256 != before.Spec.CodeSHA256 {
					uploadAt.CompareAndSwap(0, time.Now().UnixNano())
				}
				if f.Status.Image == before.Status.Image {
					continue
				}
				builtAt.CompareAndSwap(0, time.Now().UnixNano())
				if f.Status.Phase == apiv1.PhaseReady {
					readyAt.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		}()
		go func() { // what a caller sees through /fn/
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if _, body := httpGet(url); strings.Contains(body, marker) {
					newAt.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		}()
		t0 := time.Now()
		if _, err := tf.run(ctx, "apply", "-auto-approve", "-input=false"); err != nil {
			close(stop)
			return err
		}
		applied := time.Since(t0)
		for newAt.Load() == 0 || readyAt.Load() == 0 {
			if time.Since(t0) > 2*time.Minute {
				close(stop)
				return fmt.Errorf("the new code never answered")
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
		var f slessv1.Function
		env.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello-python"}, &f)
		total.ds = append(total.ds, time.Duration(newAt.Load()-t0.UnixNano()))
		apply.ds = append(apply.ds, applied)
		upload.ds = append(upload.ds, time.Duration(uploadAt.Load()-t0.UnixNano()))
		build.ds = append(build.ds, time.Duration(f.Status.Build.DurationMS)*time.Millisecond)
		rollout.ds = append(rollout.ds, time.Duration(readyAt.Load()-builtAt.Load()))
		switchD.ds = append(switchD.ds, time.Duration(newAt.Load()-readyAt.Load()))
		logf("  apply %d: new response after %s ms (terraform → upload stored %s ms, build %d ms, built → Ready %s ms, Ready → new response %s ms, apply returned after %s ms)",
			i+1, ms(total.ds[i]), ms(upload.ds[i]), f.Status.Build.DurationMS, ms(rollout.ds[i]), ms(switchD.ds[i]), ms(applied))
	}

	kan, err := kanikoOnCluster(ctx, c, env, root, work, string(orig))
	if err != nil {
		return fmt.Errorf("kaniko on the cluster: %w", err)
	}

	fmt.Printf("\n### Real single-node Kubernetes v1.34.4: a one-line change through Terraform → the new response on /fn/\n\n")
	fmt.Println("sless: `terraform apply` (examples/hello-python) → operator builds in-process → Deployment rollout → /fn/. " +
		"kaniko: the seed system's way in the same cluster: a kaniko Job (FROM the same runtime image + COPY, push) → `kubectl set image` → rollout → the Service.")
	fmt.Println("\n| step | median ms (min–max, n) |\n|---|---|")
	fmt.Printf("| sless: apply → new response on /fn/ | %s |\n", total.summary())
	fmt.Printf("| &nbsp;&nbsp;`terraform apply` start → the upload stored (CLI, provider, refresh, zip, upload) | %s |\n", upload.summary())
	fmt.Printf("| &nbsp;&nbsp;the in-process build + push (operator) | %s |\n", build.summary())
	fmt.Printf("| &nbsp;&nbsp;image built → Function Ready (rollout: pod start, readiness) | %s |\n", rollout.summary())
	fmt.Printf("| &nbsp;&nbsp;Ready → first new response through /fn/ (switch; negative: served before Ready was written) | %s |\n", signedSummary(switchD))
	fmt.Printf("| &nbsp;&nbsp;`terraform apply` wall time (returns when Ready) | %s |\n", apply.summary())
	fmt.Printf("| first request to a freshly deployed function | %s |\n", first.summary())
	fmt.Printf("| kaniko: change → new response | %s |\n", kan.total.summary())
	fmt.Printf("| &nbsp;&nbsp;of which the kaniko Job (pod start, pull, unpack, build, push) | %s |\n", kan.build.summary())
	fmt.Printf("| &nbsp;&nbsp;set image → rollout complete → new response | %s |\n", kan.rollout.summary())
	fmt.Printf("\n| comparison | ratio |\n|---|---|\n| kaniko / sless, change → new response | %.1f× |\n| kaniko Job / sless in-process build | %.0f× |\n",
		ratio(kan.total, total), ratio(kan.build, build))
	return nil
}

type kanikoResult struct{ total, build, rollout *series }

// kanikoOnCluster runs the seed's build path in the same cluster: a namespace without the
// restricted profile (kaniko unpacks the base as root), the build context in a ConfigMap, a Job
// per change whose termination message is the pushed image by digest, then a rollout.
func kanikoOnCluster(ctx context.Context, c config, env *k1n.Env, root, work, handler string) (*kanikoResult, error) {
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, env.Kubectl[0], append(env.Kubectl[1:], args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	kimg := env.Registry + "/sless-bench/kaniko:v1.23.2"
	if err := pushLayout(ctx, c.kaniko, kimg); err != nil {
		return nil, fmt.Errorf("pushing the kaniko executor (hack/build-kaniko.sh): %w", err)
	}
	envFile, _ := os.ReadFile(filepath.Join(env.Dir, "sless.env"))
	runtimeRef := ""
	for _, l := range strings.Split(string(envFile), "\n") {
		if v, ok := strings.CutPrefix(l, "RUNTIME_PYTHON="); ok {
			runtimeRef = v
		}
	}
	const ns = "kaniko-bench"
	kubectl("", "delete", "namespace", ns, "--ignore-not-found", "--wait=true")
	if _, err := kubectl("", "create", "namespace", ns); err != nil {
		return nil, err
	}
	defer kubectl("", "delete", "namespace", ns, "--wait=false")
	dockerfile := fmt.Sprintf("FROM %s\nCOPY handler.py /app/function/handler.py\nENV HANDLER=handler.handle\n", runtimeRef)
	build := func(i int, code string) (string, time.Duration, error) {
		// The context as a tarball: ConfigMap files are symlinks, which COPY would copy as such.
		tgz, err := contextTarball(map[string]string{"Dockerfile": dockerfile, "handler.py": code})
		if err != nil {
			return "", 0, err
		}
		cm := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ctx-%d","namespace":%q},"binaryData":{"context.tar.gz":%q}}`, i, ns, base64.StdEncoding.EncodeToString(tgz))
		job := fmt.Sprintf(`{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"kaniko-%d","namespace":%q},"spec":{"backoffLimit":0,"template":{"spec":{
"restartPolicy":"Never","volumes":[{"name":"ctx","configMap":{"name":"ctx-%d"}}],
"containers":[{"name":"kaniko","image":%q,"args":["--dockerfile=Dockerfile","--context=tar:///workspace/context.tar.gz","--destination=%s/kaniko-bench/fn:%d",
"--insecure","--insecure-pull","--skip-tls-verify","--image-name-with-digest-file=/dev/termination-log","--cache=false"],
"volumeMounts":[{"name":"ctx","mountPath":"/workspace"}]}]}}}}`, i, ns, i, kimg, env.Registry, i)
		start := time.Now()
		if _, err := kubectl(cm, "apply", "-f", "-"); err != nil {
			return "", 0, err
		}
		if _, err := kubectl(job, "apply", "-f", "-"); err != nil {
			return "", 0, err
		}
		if _, err := kubectl("", "-n", ns, "wait", "--for=condition=complete", "job/kaniko-"+fmt.Sprint(i), "--timeout=300s"); err != nil {
			logs, _ := kubectl("", "-n", ns, "logs", "job/kaniko-"+fmt.Sprint(i), "--tail=20")
			return "", 0, fmt.Errorf("%v\n%s", err, logs)
		}
		d := time.Since(start)
		out, err := kubectl("", "-n", ns, "get", "pods", "-l", "job-name=kaniko-"+fmt.Sprint(i), "-o", "jsonpath={.items[0].status.containerStatuses[0].state.terminated.message}")
		return strings.TrimSpace(out), d, err
	}
	image, _, err := build(0, handler)
	if err != nil {
		return nil, err
	}
	dep := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"fn","namespace":%q},"spec":{"replicas":1,
"selector":{"matchLabels":{"app":"fn"}},"strategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":1}},
"template":{"metadata":{"labels":{"app":"fn"}},"spec":{"containers":[{"name":"fn","image":%q,"ports":[{"containerPort":8080}],
"readinessProbe":{"httpGet":{"path":"/health","port":8080},"periodSeconds":1}}]}}}}`, ns, image)
	svc := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"fn","namespace":%q},"spec":{"selector":{"app":"fn"},"ports":[{"port":80,"targetPort":8080}]}}`, ns)
	for _, obj := range []string{dep, svc} {
		if _, err := kubectl(obj, "apply", "-f", "-"); err != nil {
			return nil, err
		}
	}
	if _, err := kubectl("", "-n", ns, "rollout", "status", "deploy/fn", "--timeout=180s"); err != nil {
		return nil, err
	}
	ip, err := kubectl("", "-n", ns, "get", "svc", "fn", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return nil, err
	}
	res := &kanikoResult{total: &series{}, build: &series{}, rollout: &series{}}
	runs := max(c.kanikoRuns, 1)
	logf("k8s: %d kaniko builds of the same one-line change in the cluster", runs)
	for i := 1; i <= runs; i++ {
		marker := fmt.Sprintf("kaniko-bench-%d", i)
		t0 := time.Now()
		image, d, err := build(i, strings.Replace(handler, "hello, ", marker+", ", 1))
		if err != nil {
			return nil, err
		}
		r0 := time.Now()
		if _, err := kubectl("", "-n", ns, "set", "image", "deploy/fn", "fn="+image); err != nil {
			return nil, err
		}
		if _, err := kubectl("", "-n", ns, "rollout", "status", "deploy/fn", "--timeout=180s"); err != nil {
			return nil, err
		}
		for {
			if _, body := httpGet("http://" + ip + "/?name=x"); strings.Contains(body, marker) {
				break
			}
			if time.Since(r0) > time.Minute {
				return nil, fmt.Errorf("kaniko's image never answered")
			}
			time.Sleep(5 * time.Millisecond)
		}
		res.total.ds = append(res.total.ds, time.Since(t0))
		res.build.ds = append(res.build.ds, d)
		res.rollout.ds = append(res.rollout.ds, time.Since(r0))
		logf("  kaniko %d: new response after %s ms (Job %s ms)", i, ms(time.Since(t0)), ms(d))
	}
	return res, nil
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitReady(ctx context.Context, cl *apiclient.Client, fn string) (*apiv1.Function, error) {
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f, err := cl.WaitFunction(wctx, fn, 20*time.Millisecond)
	if err == nil && f.Status.Phase != apiv1.PhaseReady {
		err = fmt.Errorf("%s: %s %s", fn, f.Status.Phase, f.Status.Message)
	}
	return f, err
}

// signedSummary is summary for a series that may hold negative durations.
func signedSummary(s *series) string {
	lo, hi := s.ds[0], s.ds[0]
	for _, d := range s.ds {
		lo, hi = min(lo, d), max(hi, d)
	}
	return fmt.Sprintf("%s ms (%s–%s, n=%d)", ms(s.median()), ms(lo), ms(hi), len(s.ds))
}

func contextTarball(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range []string{"Dockerfile", "handler.py"} {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		io.WriteString(tw, files[n])
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	err := gz.Close()
	return buf.Bytes(), err
}
