package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/k1n"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/operator/resources"
)

// Issue 28, parts 3 and 4 on the real cluster: tenant code reaches "the outside" (a server in a
// network namespace of its own, outside every range of the cluster) and nothing of the platform or
// the cluster; the install's per-namespace allow reaches that namespace only; a namespace narrowed
// to none reaches nothing; a widening is refused.
func TestEgressOnKubernetes(t *testing.T) {
	t.Parallel()
	needCluster(t)
	ctx := context.Background()
	outside := testenv.StartOutside(t)
	outside.RouteBack(t, "10.88.0.0/16") // the cluster's pods are not masqueraded

	plain, victim := tenant(t, subject("egress-plain")), tenant(t, subject("egress-victim"))
	allowedNS := apiv1.NamespaceFor(k1n.EgressAllowedSubject)
	// A fixed subject (the install names its namespace): a previous run's namespace may still be going.
	var owner *apiclient.Client
	waitFor(t, "the allowed tenant's namespace from an earlier run to go", 2*time.Minute, func() bool {
		var ns corev1.Namespace
		err := cluster.Kube.Get(ctx, client.ObjectKey{Name: allowedNS}, &ns)
		return client.IgnoreNotFound(err) == nil && (err != nil || ns.DeletionTimestamp.IsZero())
	})
	owner = tenant(t, k1n.EgressAllowedSubject)
	deploy(t, victim, "app", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return 'victim'\n"})
	for _, c := range []*apiclient.Client{plain, owner} {
		deploy(t, c, "probe", "python3.11", map[string]string{"handler.py": netProbe})
	}

	podIP := func(ns string, labels client.MatchingLabels) string {
		var pods corev1.PodList
		cluster.Kube.List(ctx, &pods, client.InNamespace(ns), labels)
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				return p.Status.PodIP
			}
		}
		t.Fatalf("no pod %v in %s", labels, ns)
		return ""
	}
	hostPort := func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return p.Host
	}
	var apiSvc corev1.Service
	if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &apiSvc); err != nil {
		t.Fatal(err)
	}
	var dnsSvc corev1.Service
	if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &dnsSvc); err != nil {
		t.Fatal(err)
	}
	allowedAddr := cluster.EgressAllowed.Addr().String()
	const (
		outsideT  = "outside"
		allowedT  = "allowed (the install's NAMESPACE=CIDR:PORT)"
		metadataT = "metadata stand-in 169.254.77.77"
		dnsT      = "cluster DNS"
	)
	targets := map[string]string{
		outsideT:                "tcp:" + hostPort(outside.URL),
		metadataT:               "tcp:" + hostPort(outside.MetadataURL),
		allowedT:                "tcp:" + allowedAddr,
		dnsT:                    "dns:" + dnsSvc.Spec.ClusterIP + ":53",
		"API (NodePort)":        "tcp:" + hostPort(cluster.Endpoint),
		"API (pod)":             "tcp:" + podIP("sless-system", client.MatchingLabels{"app.kubernetes.io/name": "sless-api"}) + ":8080",
		"index proxy":           "tcp:" + podIP("sless-system", client.MatchingLabels{"app.kubernetes.io/name": "sless-controller"}) + ":3128",
		"registry":              "tcp:" + cluster.RegistryDirect,
		"registry proxy":        "tcp:" + cluster.Registry,
		"S3 (MinIO)":            "tcp:" + hostPort(cluster.S3Endpoint),
		"PostgreSQL":            fmt.Sprintf("tcp:%s:%d", cluster.Postgres.Host, cluster.Postgres.Port),
		"kubelet":               "tcp:" + k1n.NodeIP + ":10250",
		"Kubernetes API":        "tcp:" + apiSvc.Spec.ClusterIP + ":443",
		"Kubernetes API (node)": "tcp:" + k1n.NodeIP + ":6443",
		"another tenant's pod":  "tcp:" + podIP(victim.Namespace(), client.MatchingLabels{"sless.dev/function": "app"}) + ":8080",
	}
	closed := func(open ...string) map[string]string {
		want := map[string]string{}
		for k := range targets {
			want[k] = "blocked"
		}
		want[dnsT] = "answered"
		for _, k := range open {
			want[k] = "open"
		}
		return want
	}
	probe := func(c *apiclient.Client) map[string]string {
		t.Helper()
		tj, _ := json.Marshal(targets)
		code, body := get(cluster.Endpoint + "/fn/" + c.Namespace() + "/probe?t=" + url.QueryEscape(string(tj)))
		var got map[string]string
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("probe in %s: %d %s", c.Namespace(), code, body)
		}
		return got
	}
	// expect probes until the answer is want (a policy change reaches kube-router's rules within
	// seconds), then reports what still differs.
	expect := func(t *testing.T, who string, c *apiclient.Client, want map[string]string) {
		t.Helper()
		var got map[string]string
		deadline := time.Now().Add(60 * time.Second)
		for {
			got = probe(c)
			same := true
			for k, w := range want {
				same = same && got[k] == w
			}
			if same || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s, %s (%s): %s, want %s", who, k, targets[k], got[k], w)
			}
		}
		t.Logf("%s: %v", who, got)
	}

	t.Run("install default: the outside only", func(t *testing.T) {
		expect(t, "a function of a plain namespace", plain, closed(outsideT))
		expect(t, "a function of the allowed namespace", owner, closed(outsideT, allowedT))
		eg, err := plain.GetEgress(ctx)
		if err != nil || eg.Mode != apiv1.EgressInternet || len(eg.Allow) != 0 || eg.Note != "" {
			t.Errorf("GET egress of a plain namespace: %+v %v", eg, err)
		}
		eg, err = owner.GetEgress(ctx)
		if err != nil || eg.Mode != apiv1.EgressInternet || len(eg.Allow) != 1 || eg.Install.Allow[0] != k1n.NodeIP+"/32:"+portOf(allowedAddr) {
			t.Errorf("GET egress of the allowed namespace: %+v %v", eg, err)
		}
		// The rendering: 0.0.0.0/0 except the cluster's, private, link-local and metadata ranges.
		var np networkingv1.NetworkPolicy
		if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: plain.Namespace(), Name: "sless-egress"}, &np); err != nil {
			t.Fatal(err)
		}
		if b := np.Spec.Egress[0].To[0].IPBlock; b == nil || b.CIDR != "0.0.0.0/0" || !strings.Contains(strings.Join(b.Except, ","), "169.254.0.0/16") ||
			!strings.Contains(strings.Join(b.Except, ","), "10.0.0.0/8") || np.Annotations[resources.AnnotationEgressNote] != "" {
			t.Errorf("sless-egress: %+v %v", np.Spec.Egress, np.Annotations)
		}
	})

	t.Run("from a job", func(t *testing.T) {
		ev, _ := json.Marshal(map[string]any{"targets": targets})
		if _, err := plain.CreateJob(ctx, apiv1.Job{Name: "probe", FunctionRef: "probe", EventJSON: string(ev), RunID: 1}); err != nil {
			t.Fatal(err)
		}
		var j *apiv1.Job
		waitFor(t, "the probe job", 2*time.Minute, func() bool {
			j, _ = plain.GetJob(ctx, "probe")
			return j != nil && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed)
		})
		var got map[string]string
		if err := json.Unmarshal([]byte(j.Status.Message), &got); j.Status.Phase != apiv1.JobSucceeded || err != nil {
			t.Fatalf("job %+v", j.Status)
		}
		for k, w := range closed(outsideT) {
			if got[k] != w {
				t.Errorf("from a job pod, %s: %s, want %s", k, got[k], w)
			}
		}
	})

	t.Run("a tenant cannot widen", func(t *testing.T) {
		for _, tc := range []struct {
			c    *apiclient.Client
			rule apiv1.EgressRule
			name string
		}{
			{plain, apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{allowedAddrCIDR(allowedAddr)}}, allowedAddrCIDR(allowedAddr)},
			{plain, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{"10.88.0.0/16"}}, "10.88.0.0/16"},
			{owner, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{k1n.NodeIP + "/32:6443"}}, k1n.NodeIP + "/32:6443"},
			{owner, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{k1n.NodeIP + "/32"}}, k1n.NodeIP + "/32"},
		} {
			_, err := tc.c.SetEgress(ctx, tc.rule)
			var e *apiv1.Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != apiv1.CodeInvalidArgument || !strings.Contains(e.Message, tc.name) {
				t.Errorf("PUT %+v: %v, want 400 invalid_argument naming %s", tc.rule, err, tc.name)
			}
		}
		var ns corev1.Namespace
		if err := cluster.Kube.Get(ctx, client.ObjectKey{Name: plain.Namespace()}, &ns); err != nil || ns.Annotations[resources.AnnotationEgress] != "" {
			t.Errorf("a refused rule was stored: %v %v", ns.Annotations, err)
		}
		// Another tenant's namespace is not found, as on every route.
		for _, m := range []string{http.MethodGet, http.MethodPut} {
			req, _ := http.NewRequest(m, cluster.Endpoint+"/v1/namespaces/"+owner.Namespace()+"/egress", strings.NewReader(`{"mode":"internet","allow":["0.0.0.0/0"]}`))
			req.Header.Set("Authorization", "Bearer "+token(t, subject("egress-plain")))
			req.Header.Set("Content-Type", "application/json")
			resp, err := httpc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s another tenant's egress: %d, want 404", m, resp.StatusCode)
			}
		}
	})

	t.Run("narrowed to none", func(t *testing.T) {
		// Keeping the allowed destination: only it.
		if _, err := owner.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressNone, Allow: []string{allowedAddrCIDR(allowedAddr)}}); err != nil {
			t.Fatal(err)
		}
		expect(t, "the allowed namespace narrowed to none and its allow", owner, closed(allowedT))
		// Nothing at all.
		if _, err := owner.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressNone}); err != nil {
			t.Fatal(err)
		}
		expect(t, "the allowed namespace narrowed to none", owner, closed())
		expect(t, "a plain namespace meanwhile", plain, closed(outsideT))
		// And back.
		if _, err := owner.SetEgress(ctx, apiv1.EgressRule{Mode: apiv1.EgressInternet, Allow: []string{allowedAddrCIDR(allowedAddr)}}); err != nil {
			t.Fatal(err)
		}
		expect(t, "the allowed namespace widened back to what the install permits", owner, closed(outsideT, allowedT))
	})
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// allowedAddrCIDR is "HOST/32:PORT" of a listener's address.
func allowedAddrCIDR(addr string) string {
	h, p, _ := net.SplitHostPort(addr)
	return h + "/32:" + p
}
