package kubestore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/operator/kubestore"
)

// The API's bound on log reads without follow, on the Kubernetes store's own Logs (envtest runs
// no kubelet: a stopped pod's log kept in the code store, 7 MB): 4 real readers that do not read
// their answers hold the namespace's reads, a 5th is 429 throttled with Retry-After 1, and once
// they have gone, reads are answered again.
func TestLogReadsBoundedOnKeptLogs(t *testing.T) {
	var code codestore.Store
	bk := apitest.Backend{Name: "kubestore", OwnLogs: true, New: func(t testing.TB, c codestore.Store, r objects.Resolver) (objects.Backend, apitest.Controller) {
		b, ctrl := kubeBackend.New(t, c, r)
		cs, err := kubernetes.NewForConfig(shared.Get(t).Config)
		if err != nil {
			t.Fatal(err)
		}
		b.Logs, code = &kubestore.Logs{Pods: cs, Code: c}, c
		return b, ctrl
	}}
	e := apitest.NewEnv(t, bk)
	e.Ensure()
	e.Function("talker")
	start := time.Now().UTC()
	lines := make([]apiv1.LogLine, 1000)
	for i := range lines {
		lines[i] = apiv1.LogLine{Time: start.Add(time.Duration(i) * time.Millisecond), Instance: "talker-7d9f-x1", Stream: apiv1.StreamOutput,
			Line: fmt.Sprintf("%d %s", i, strings.Repeat("z", 7000))}
	}
	if err := fnlog.Save(context.Background(), code, fnlog.StoppedKey(e.NS, "talker", "talker-7d9f-x1"), lines); err != nil {
		t.Fatal(err)
	}
	path := "/v1/namespaces/" + e.NS + "/functions/talker/logs?tail=10000"
	get := func() (int, http.Header, string) {
		t.Helper()
		return testenv.AuthGet(t, e.URL+path, e.Token)
	}
	if code, _, body := get(); code != 200 || strings.Count(body, "\n") != 1000 {
		t.Fatalf("the kept log: %d, %d lines", code, strings.Count(body, "\n"))
	}
	var held []net.Conn
	for range 4 {
		held = append(held, testenv.HeldRead(t, e.URL, path, e.Token))
	}
	if code, hdr, body := get(); code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"throttled"`) {
		t.Errorf("a 5th read while 4 are held: %d, Retry-After %q, %.200s; want 429 throttled, Retry-After 1", code, hdr.Get("Retry-After"), body)
	}
	for _, c := range held {
		c.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, _, _ := get(); code != 200; code, _, _ = get() {
		if time.Now().After(deadline) {
			t.Fatalf("reads still refused (%d) 30 s after the held ones went", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
