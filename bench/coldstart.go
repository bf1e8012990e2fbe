package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/k1n"
)

// ScaledAtAnnotation is what the operator's Scaler writes on a function's Deployment in the patch
// that scales it up: when it decided to (RFC 3339, nanoseconds).
const ScaledAtAnnotation = "sless.dev/scaled-at"

// coldCycles is how many cold starts each measurement takes (issue 16: at least 10).
const coldCycles = 12

// benchColdStart measures cold starts on the real cluster (issue 16): zero pods → the first
// response through /fn/, split by the Deployment's scaled-at annotation, /fn/'s Server-Timing and
// a pod watch; the same function image scaled 0 → 1 the way a KEDA/HPA setup does (wait for the
// kubelet's Ready, then send to the pod); and a ramp from zero to 40 clients.
func benchColdStart(ctx context.Context, c config, work string, cluster func() (*k1n.Env, error)) error {
	env, err := cluster()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(env.Dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k := &kube{kc: kc, env: env}
	tok, err := env.Token("bench-coldstart@bench.test")
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
	defer kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})

	const fn = "cold"
	if _, err := createColdFunction(ctx, cl, fn, 10, "def handle(event):\n    return 'ok'\n"); err != nil {
		return err
	}
	d, err := k.deployment(ctx, ns, fn)
	if err != nil {
		return err
	}
	sel := labels.Set(d.Spec.Selector.MatchLabels).String()
	image := d.Spec.Template.Spec.Containers[0].Image
	url := cl.FunctionURL(fn)

	logf("coldstart: %d cold requests through /fn/ (each from zero pods)", coldCycles)
	gated, err := k.coldRun(ctx, ns, fn, sel, url)
	if err != nil {
		return err
	}
	// The same cycles with the operator's policy gate off (no init container in the pod): what
	// the gate costs, measured rather than estimated.
	var ungated *coldRun
	if len(d.Spec.Template.Spec.InitContainers) > 0 {
		logf("coldstart: the operator without --wait-for-network-policy (no init container), %d cold requests", coldCycles)
		restore, err := k.policyGate(ctx, env, ns, fn, false)
		if err != nil {
			return err
		}
		ungated, err = k.coldRun(ctx, ns, fn, sel, url)
		if rerr := restore(); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}

	logf("coldstart: the readiness path (plain Deployment of the same image, scale 0 → 1, kubelet Ready, then send) %d×", coldCycles)
	anchor, anchorTotal, err := readinessAnchor(ctx, k, image)
	if err != nil {
		return fmt.Errorf("readiness anchor: %w", err)
	}

	logf("coldstart: ramp from zero to 40 clients for 20 s")
	rp, err := ramp(ctx, cl, func() error { return k.waitZero(ctx, ns, rampFunction, 3*time.Minute) }, func() int32 {
		if d, err := k.deployment(ctx, ns, rampFunction); err == nil {
			return d.Status.ReadyReplicas
		}
		return 0
	})
	if err != nil {
		return fmt.Errorf("ramp: %w", err)
	}

	fmt.Printf("\n### Cold start on the real single-node Kubernetes v1.34.4 (zero pods → first response through /fn/), %d cycles\n\n", coldCycles)
	fmt.Println("python3.11 function returning 'ok', min_replicas 0, idle_timeout_sec 5; the install's autoscale windows (10 s stable, 2 s panic); the function image present on the node. " +
		"Client side: a new connection per request, time to the response's first byte. Parts: the Deployment's " + ScaledAtAnnotation + " annotation (the Scaler's decision, operator clock = host clock), " +
		"/fn/'s Server-Timing (offsets from the hold's start, taken as the send time), and a pod watch from the host (first time each stage was seen).")
	printRun := func(title string, r *coldRun) {
		fmt.Printf("\n#### %s\n\n", title)
		fmt.Printf("| cold start through /fn/ | p50 ms | p95 ms | min–max ms | n |\n|---|---|---|---|---|\n| **total (client: sent → first byte)** | **%s** | **%s** | %s–%s | %d |\n",
			ms(pct(r.total, 50)), ms(pct(r.total, 95)), ms(slices.Min(r.total)), ms(slices.Max(r.total)), len(r.total))
		if r.annotated == 0 {
			fmt.Printf("\n(the Deployment carried no %s annotation: decision and pod start from it are n/a; a watch's view is shown instead)\n", ScaledAtAnnotation)
		}
		fmt.Println()
		r.sl.table(coldCycles)
		fmt.Println("\nThe pod's stages as the API server saw them (a pod watch from the host; the kubelet writes its status after each sync, so a stage shows at the write after it):")
		fmt.Println()
		r.stages.table(coldCycles)
	}
	printRun("sless, as installed (operator --wait-for-network-policy: the policy-gate init container in every function pod)", gated)
	if ungated != nil {
		printRun("sless, the same cluster with the operator's policy gate off (no init container)", ungated)
	}
	fmt.Printf("\n#### The readiness path (KEDA/HPA-style): a plain Deployment of the same image, readinessProbe periodSeconds 1, no init container\n\n")
	fmt.Printf("| readiness path | p50 ms | p95 ms | min–max ms | n |\n|---|---|---|---|---|\n| **total (scale 0→1 → first byte from the pod)** | **%s** | **%s** | %s–%s | %d |\n",
		ms(pct(anchorTotal, 50)), ms(pct(anchorTotal, 95)), ms(slices.Min(anchorTotal)), ms(slices.Max(anchorTotal)), len(anchorTotal))
	fmt.Println()
	anchor.table(coldCycles)
	fmt.Printf("\n| target | measured | verdict |\n|---|---|---|\n")
	check := func(label string, r *coldRun) {
		ratio := float64(pct(anchorTotal, 50)) / float64(pct(r.total, 50))
		fmt.Printf("| cluster cold start p50 ≤ 800 ms (%s) | %s ms | %s |\n", label, ms(pct(r.total, 50)), verdict(pct(r.total, 50) <= 800*time.Millisecond))
		fmt.Printf("| readiness path / sless p50 ≥ 1.5× (%s) | %.2f× | %s |\n", label, ratio, verdict(ratio >= 1.5))
	}
	check("as installed", gated)
	if ungated != nil {
		check("policy gate off", ungated)
	}
	rp.print("on the cluster", "pods", "pods ready (kubelet)")
	return nil
}

// coldRun is one series of cold requests through /fn/.
type coldRun struct {
	total      []time.Duration
	sl, stages *parts
	annotated  int
}

// coldRun sends coldCycles requests through /fn/, each once the function is at zero pods.
func (k *kube) coldRun(ctx context.Context, ns, fn, sel, url string) (*coldRun, error) {
	res := &coldRun{sl: &parts{}, stages: &parts{}}
	sl, stages, kc := res.sl, res.stages, k.kc
	for i := 0; i < coldCycles; i++ {
		if err := k.waitZero(ctx, ns, fn, 3*time.Minute); err != nil {
			return nil, err
		}
		time.Sleep(time.Second) // the API's view of the endpoints catches up
		pw, err := watchPods(ctx, kc, ns, sel)
		if err != nil {
			return nil, err
		}
		scaledSeen, err := k.watchScaleUp(ctx, ns, fn)
		if err != nil {
			pw.stop()
			return nil, err
		}
		r, err := coldRequest(ctx, url)
		if err == nil && (r.code != 200 || r.body != "ok") {
			err = fmt.Errorf("cold request: %d %s", r.code, r.body)
		}
		if err != nil {
			pw.stop()
			scaledSeen()
			return nil, err
		}
		// The kubelet's Ready comes after /fn/ has served (the activator probes by itself): wait
		// for it, for the record.
		for w := time.Now(); time.Since(w) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
			if p := pw.first(); p != nil && !p.kubeletReady.IsZero() {
				break
			}
		}
		pw.stop()
		seen := scaledSeen()
		pod := pw.first()
		dep, _ := k.deployment(ctx, ns, fn)
		var scaledAt time.Time
		if dep != nil {
			if v, err := time.Parse(time.RFC3339Nano, dep.Annotations[ScaledAtAnnotation]); err == nil &&
				v.After(r.sent.Add(-time.Second)) && v.Before(r.sent.Add(r.firstByte)) {
				scaledAt = v
			}
		}
		res.total = append(res.total, r.firstByte)
		listed := r.sent.Add(r.st.start)
		line := fmt.Sprintf("  cold %d: %s ms (Server-Timing hold %s", i+1, ms(r.firstByte), ms(r.st.hold))
		if !scaledAt.IsZero() {
			res.annotated++
			sl.add("decision: request sent → scaled-at (Scaler's patch)", scaledAt.Sub(r.sent))
			if r.st.has["sless-start"] {
				sl.add("pod start: scaled-at → listed by /fn/ with an address", listed.Sub(scaledAt))
			}
			line += fmt.Sprintf(", scaled-at +%s", ms(scaledAt.Sub(r.sent)))
		}
		if !seen.IsZero() {
			sl.add("(decision as a watch from the host saw spec.replicas 0→1)", seen.Sub(r.sent))
			if scaledAt.IsZero() && r.st.has["sless-start"] {
				sl.add("(pod start from that watch → listed)", listed.Sub(seen))
			}
		}
		if r.st.has["sless-start"] {
			sl.add("request sent → listed (decision + pod start)", r.st.start)
		}
		if r.st.has["sless-ready"] && r.st.has["sless-start"] {
			sl.add("runtime ready: listed → /health OK (activator's probe)", r.st.ready-r.st.start)
			line += fmt.Sprintf(", listed +%s, ready +%s", ms(r.st.start), ms(r.st.ready))
		}
		if r.st.has["sless-hold"] {
			sl.add("first byte: granted → response's first byte (forward, handler, back)", r.firstByte-r.st.hold)
		}
		if pod != nil {
			base := r.sent
			if !scaledAt.IsZero() {
				base = scaledAt
			} else if !seen.IsZero() {
				base = seen
			}
			stage := func(name string, from, to time.Time) {
				if !from.IsZero() && !to.IsZero() {
					stages.add(name, to.Sub(from))
				}
			}
			stage("scale-up → pod created (ReplicaSet controller)", base, pod.created)
			stage("created → scheduled (kube-scheduler, binding)", pod.created, pod.scheduled)
			stage("scheduled → pod IP reported (kubelet: volumes, sandbox, CNI, first container started, status write)", pod.scheduled, pod.ip)
			if pod.hasInit {
				stage("pod IP → Initialized reported (the policy-gate init container ran, and the kubelet saw it exit)", pod.ip, pod.initialized)
			}
			stage("listed by /fn/ → kubelet Ready reported (readinessProbe, period 1 s)", listed, pod.kubeletReady)
			line += fmt.Sprintf("; pod created +%s, IP +%s, initialized +%s, running +%s, kubelet Ready +%s",
				msSince(r.sent, pod.created), msSince(r.sent, pod.ip), msSince(r.sent, pod.initialized), msSince(r.sent, pod.running), msSince(r.sent, pod.kubeletReady))
		}
		logf("%s)", line)
	}

	return res, nil
}

// readinessAnchor is the path a KEDA/HPA setup takes from zero, in the same cluster with the same
// image: a plain Deployment (the function's security context and resources, no init container)
// with a readinessProbe of period 1 s (the kubelet's finest), scaled 0 → 1; the request is sent
// to the pod from the host once the kubelet has marked it Ready.
func readinessAnchor(ctx context.Context, k *kube, image string) (*parts, []time.Duration, error) {
	const ns, name = "coldstart-anchor", "anchor"
	kc := k.kc
	kc.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	for i := 0; i < 300; i++ {
		if _, err := kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, err
	}
	defer kc.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	dep := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q},"spec":{"replicas":0,
"selector":{"matchLabels":{"app":%q}},
"template":{"metadata":{"labels":{"app":%q}},"spec":{"automountServiceAccountToken":false,"enableServiceLinks":false,"terminationGracePeriodSeconds":1,
"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"runAsGroup":65532,"seccompProfile":{"type":"RuntimeDefault"}},
"volumes":[{"name":"tmp","emptyDir":{"sizeLimit":"64Mi"}}],
"containers":[{"name":"function","image":%q,"ports":[{"containerPort":8080}],
"resources":{"requests":{"memory":"128Mi","cpu":"25m"},"limits":{"memory":"128Mi"}},
"securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}},
"volumeMounts":[{"name":"tmp","mountPath":"/tmp"}],
"readinessProbe":{"httpGet":{"path":"/health","port":8080},"periodSeconds":1,"failureThreshold":3}}]}}}}`, name, ns, name, name, image)
	if _, err := runKubectl(ctx, k.env, dep, "apply", "-f", "-"); err != nil {
		return nil, nil, err
	}
	p := &parts{}
	var total []time.Duration
	scale := func(n int) error {
		_, err := kc.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)), metav1.PatchOptions{})
		return err
	}
	for i := 0; i < coldCycles; i++ {
		if err := scale(0); err != nil {
			return nil, nil, err
		}
		if err := k.waitZero(ctx, ns, name, 2*time.Minute); err != nil {
			return nil, nil, err
		}
		time.Sleep(time.Second)
		pw, err := watchPods(ctx, kc, ns, "app="+name)
		if err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		if err := scale(1); err != nil {
			pw.stop()
			return nil, nil, err
		}
		var pod *podTimes
		for pod == nil || pod.kubeletReady.IsZero() {
			if time.Since(t0) > time.Minute {
				pw.stop()
				return nil, nil, fmt.Errorf("the anchor pod was not Ready within a minute")
			}
			time.Sleep(2 * time.Millisecond)
			pod = pw.first()
		}
		pw.stop()
		got, err := kc.CoreV1().Pods(ns).Get(ctx, pod.name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		r, err := coldRequest(ctx, "http://"+got.Status.PodIP+":8080/")
		if err == nil && r.code != 200 {
			err = fmt.Errorf("anchor: %d %s", r.code, r.body)
		}
		if err != nil {
			return nil, nil, err
		}
		end := r.sent.Add(r.firstByte)
		total = append(total, end.Sub(t0))
		p.add("scale 0→1 → pod created", pod.created.Sub(t0))
		p.add("created → pod IP seen (scheduling, sandbox, CNI)", pod.ip.Sub(pod.created))
		if !pod.running.IsZero() {
			p.add("pod IP → container running", pod.running.Sub(pod.ip))
			p.add("running → kubelet Ready (runtime start + probe period)", pod.kubeletReady.Sub(pod.running))
		}
		p.add("Ready seen → first byte from the pod", end.Sub(pod.kubeletReady))
		logf("  anchor %d: %s ms (created +%s, IP +%s, running +%s, Ready +%s)", i+1, ms(end.Sub(t0)),
			msSince(t0, pod.created), msSince(t0, pod.ip), msSince(t0, pod.running), msSince(t0, pod.kubeletReady))
	}
	return p, total, nil
}

// policyGate turns the operator's --wait-for-network-policy on or off (a rollout of the operator)
// and waits until the function's Deployment follows; the returned func restores it.
func (k *kube) policyGate(ctx context.Context, env *k1n.Env, ns, fn string, on bool) (func() error, error) {
	const flag = "--wait-for-network-policy"
	set := func(on bool) error {
		op, err := k.deployment(ctx, "sless-system", "sless-controller")
		if err != nil {
			return err
		}
		args := slices.DeleteFunc(slices.Clone(op.Spec.Template.Spec.Containers[0].Args), func(a string) bool { return a == flag })
		if on {
			args = append(args, flag)
		}
		op.Spec.Template.Spec.Containers[0].Args = args
		if _, err := k.kc.AppsV1().Deployments("sless-system").Update(ctx, op, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if _, err := runKubectl(ctx, env, "", "-n", "sless-system", "rollout", "status", "deploy/sless-controller", "--timeout=180s"); err != nil {
			return err
		}
		for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
			d, err := k.deployment(ctx, ns, fn)
			if err == nil && (len(d.Spec.Template.Spec.InitContainers) > 0) == on {
				if code, _ := httpGet(env.Endpoint + "/readyz"); code == 200 {
					return nil
				}
			}
			if time.Since(start) > 2*time.Minute {
				return fmt.Errorf("the function's Deployment did not follow %s=%v", flag, on)
			}
		}
	}
	if err := set(on); err != nil {
		return nil, err
	}
	return func() error { return set(!on) }, nil
}
