package main_test

import (
	"bytes"
	"context"

	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/layers"
)

// process is one sless-operator process of a test, its output kept.
type process struct {
	name string
	addr string
	// metrics is --metrics-listen's address.
	metrics string
	cmd     *exec.Cmd
	mu      sync.Mutex
	out     bytes.Buffer
	done    chan struct{}
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// The production topology on a real kube-apiserver: two API processes and two controller
// processes. The API serves without any controller in its process (a build happens on the
// controller leader), only one controller leads, the standby takes over when the leader stops, and
// a stopping API replica fails /readyz, finishes the request it holds and exits cleanly.
func TestRolesApart(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	reg, keysDir := testenv.AuthRegistry(t)
	keys, err := regauth.Load(keysDir)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := layers.FromFS(fstest.MapFS{"server.py": {Data: []byte("print('server')\n")}}, layers.WithPrefix("/app"))
	img, _ := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	ref, _ := name.ParseReference(reg + "/sless/runtime-python3.11:latest")
	if err := remote.Write(ref, img, remote.WithAuth(keys.Platform().Authenticator())); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	dir := t.TempDir()
	bin, _ := binaries(t)
	secret := "0123456789abcdef0123456789abcdef-roles"
	os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o600)
	codeDir := filepath.Join(dir, "code") // shared by every process, as S3 would be
	// Each role as the install's account for it, with its role and admission policies: what
	// either needs and RBAC or admission refuses fails here.
	env.InstallRBAC(t, "../../operator/config/rbac")
	kubeconfig := map[string]string{"api": env.ServiceAccountKubeconfig(t, "sless-system", "sless-api"),
		"controller": env.ServiceAccountKubeconfig(t, "sless-system", "sless-controller")}
	start := func(name, role string, extra ...string) *process {
		p := &process{name: name, addr: testenv.FreeAddr(t), metrics: testenv.FreeAddr(t), done: make(chan struct{})}
		args := append([]string{"--role", role, "--listen", p.addr, "--metrics-listen", p.metrics, "--public-url", "http://" + p.addr, "--registry", reg, "--code-dir", codeDir,
			"--hs256-secret-file", filepath.Join(dir, "secret"), "--runtime", "python3.11=" + ref.Context().Digest(d.String()).String()}, extra...)
		if role == "controller" {
			// The registry's keys are the controller's only.
			args = append(args, "--registry-auth-dir", keysDir)
		}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig[role])
		p.cmd.Stdout, p.cmd.Stderr = p, p
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() {
			p.cmd.Process.Signal(os.Interrupt)
			<-p.done
			if t.Failed() {
				t.Logf("--- %s:\n%s", p.name, p.logs())
			}
		})
		return p
	}
	ready := func(p *process) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if resp, err := http.Get("http://" + p.addr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
			if p.exited() || time.Now().After(deadline) {
				t.Fatalf("%s not ready:\n%s", p.name, p.logs())
			}
		}
	}
	// One after the other: a free port is only free until its process binds it, and the next
	// pick could be the same.
	// The A replicas want a scrape token on /metrics; the B replicas serve it to whoever reaches
	// their metrics listener.
	const scrapeToken = "scrape-0123456789abcdef-roles"
	os.WriteFile(filepath.Join(dir, "scrape-token"), []byte(scrapeToken+"\n"), 0o600)
	withToken := []string{"--metrics-token-file", filepath.Join(dir, "scrape-token")}
	apiA := start("api-a", "api", append(withToken, "--loads-listen", testenv.FreeAddr(t), "--shutdown-delay-duration", "1s")...)
	ready(apiA)
	apiB := start("api-b", "api", "--loads-listen", testenv.FreeAddr(t))
	ready(apiB)
	ctlA := start("controller-a", "controller", withToken...)
	ready(ctlA)
	ctlB := start("controller-b", "controller")
	ready(ctlB)
	token, _ := auth.IssueHS256([]byte(secret), "roles-user", time.Hour)
	// Builds happen on the controllers: their /metrics counts them. No role serves /metrics on
	// --listen.
	t.Run("metrics", func(t *testing.T) {
		// The admin JWT is valid: the API takes it (and gives it a namespace of its own).
		if admin, _ := apiclient.New("http://"+apiA.addr, apitest.AdminToken(t, []byte(secret))); admin.EnsureNamespace(ctx) != nil {
			t.Error("the API refuses the admin JWT: the checks below prove nothing with it")
		}
		checkMetricsListeners(t, []byte(secret), token, scrapeToken, apiA.addr, apiA.metrics, apiB.metrics)
		checkMetricsListeners(t, []byte(secret), token, scrapeToken, ctlA.addr, ctlA.metrics, ctlB.metrics)
		if _, body := scrape(t, ctlA.metrics, scrapeToken); !strings.Contains(body, "sless_build_duration_seconds_count") {
			t.Errorf("controller /metrics:\n%.500s", body)
		}
		if _, body := scrape(t, apiB.metrics, ""); !strings.Contains(body, "sless_http_requests_total{") {
			t.Errorf("API /metrics:\n%.500s", body)
		}
	})

	clientOf := func(p *process) *apiclient.Client {
		c, _ := apiclient.New("http://"+p.addr, token)
		return c
	}
	built := func(c *apiclient.Client, fn string) {
		t.Helper()
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: fn, Runtime: "python3.11", TimeoutSec: 5}); err != nil {
			t.Fatal(err)
		}
		z := testenv.Zip(map[string]string{"handler.py": "def handle(e): return '" + fn + "'\n"})
		if _, err := c.Upload(ctx, fn, bytes.NewReader(z), int64(len(z))); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			f, _ := c.GetFunction(ctx, fn)
			if f != nil && strings.Contains(f.Status.Image, "@sha256:") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not built: %+v", fn, f)
			}
		}
	}
	c := clientOf(apiA)
	if err := c.EnsureNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	built(c, "first")

	// Exactly one controller leads.
	leader, standby := ctlA, ctlB
	holder := func() string {
		var lease coordinationv1.Lease
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-operator.sless.dev"}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	const acquired = "successfully acquired lease"
	switch a, b := strings.Contains(ctlA.logs(), acquired), strings.Contains(ctlB.logs(), acquired); {
	case a && b, !a && !b:
		t.Fatalf("leaders: controller-a %v, controller-b %v (lease held by %q)", a, b, holder())
	case b:
		leader, standby = ctlB, ctlA
	}
	before := holder()
	if before == "" {
		t.Fatal("no lease holder")
	}

	// The leader stops: it releases the Lease and the standby takes over and builds.
	stopped := time.Now()
	leader.cmd.Process.Signal(os.Interrupt)
	<-leader.done
	var took time.Duration
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if h := holder(); h != "" && h != before && strings.Contains(standby.logs(), acquired) {
			took = time.Since(stopped)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not take over within 15 s (holder %q)", holder())
		}
	}
	t.Logf("failover: the standby leads %v after the leader was told to stop", took.Round(time.Millisecond))
	built(clientOf(apiB), "second")

	// A leader that dies without releasing the Lease (SIGKILL: a node lost) is replaced within 15 s.
	ctlC := start("controller-c", "controller")
	ready(ctlC)
	before = holder()
	killed := time.Now()
	standby.cmd.Process.Kill()
	<-standby.done
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if h := holder(); h != "" && h != before && strings.Contains(ctlC.logs(), acquired) {
			took = time.Since(killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no controller took over within 15 s of the leader's SIGKILL (holder %q)", holder())
		}
	}
	t.Logf("failover after SIGKILL: %v", took.Round(time.Millisecond))
	built(clientOf(apiB), "third")

	// A stopping API replica: a request it holds (no instance will ever come up here) is answered,
	// /readyz fails during the shutdown delay while other requests are still served, and it exits 0.
	held := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + apiA.addr + "/fn/" + c.Namespace() + "/first")
		if err != nil {
			held <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	for deadline := time.Now().Add(5 * time.Second); !metricsHave(t, apiA.metrics, scrapeToken, `sless_function_held_requests{function="first"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the request is not held")
		}
	}
	apiA.cmd.Process.Signal(os.Interrupt)
	for deadline := time.Now().Add(900 * time.Millisecond); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + apiA.addr + "/readyz")
		if err != nil {
			t.Fatalf("/readyz during the shutdown delay: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after the signal", resp.StatusCode)
		}
	}
	if _, err := c.GetFunction(ctx, "first"); err != nil {
		t.Errorf("a request during the shutdown delay: %v", err)
	}
	// …answered with Connection: close: the client moves to another replica by itself.
	if resp, err := http.Get("http://" + apiA.addr + "/healthz"); err != nil || !resp.Close {
		t.Errorf("an answer during the shutdown delay keeps the connection: %v", err)
	} else {
		resp.Body.Close()
	}
	select {
	case code := <-held:
		if code != http.StatusGatewayTimeout {
			t.Errorf("the held request was answered %d, want 504 after the function's timeout", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not answered")
	}
	select {
	case <-apiA.done:
		if code := apiA.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("api-a exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("api-a did not exit")
	}
	if !strings.Contains(apiA.logs(), `"msg":"draining"`) {
		t.Errorf("no draining line in api-a's log")
	}
}
