package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/auth"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/layers"
)

// The operator binary on a real kube-apiserver: the REST API takes an upload, the Function
// reconciler in the same process builds it in-process and creates the Deployment.
func TestOperatorBinary(t *testing.T) {
	env := kubetest.Start(t)
	// The operator elects its leader with a Lease in its namespace.
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	reg, keysDir := testenv.AuthRegistry(t)
	keys, err := regauth.Load(keysDir)
	if err != nil {
		t.Fatal(err)
	}
	platform := remote.WithAuth(keys.Platform().Authenticator())
	l, _ := layers.FromFS(fstest.MapFS{"server.py": {Data: []byte("print('server')\n")}}, layers.WithPrefix("/app"))
	img, _ := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	ref, _ := name.ParseReference(reg + "/sless/runtime-python3.11:latest")
	if err := remote.Write(ref, img, platform); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	dir := t.TempDir()
	bin, _ := binaries(t)
	t.Run("every flag the install manifest passes exists", func(t *testing.T) {
		flags := helpFlags(t, bin)
		manifest, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "operator", "config", "manager", "manager.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(manifest), "\n") {
			arg, ok := strings.CutPrefix(strings.TrimSpace(line), "- --")
			if !ok {
				continue
			}
			n++
			flagName, _, _ := strings.Cut(arg, "=")
			if _, ok := flags[flagName]; !ok {
				t.Errorf("manager.yaml passes --%s, which sless-operator does not define", flagName)
			}
		}
		if n < 10 {
			t.Errorf("found only %d args in manager.yaml", n)
		}
	})
	t.Run("the API takes no registry key", func(t *testing.T) {
		for _, flag := range []string{"--registry-auth-dir", "--pull-secret-file"} {
			out, err := exec.Command(bin, "--role", "api", "--registry", "r:5000", "--runtime", "python3.11=r/x@sha256:1",
				"--hs256-secret-file", "/nonexistent", flag, t.TempDir()).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "--role=api hands out no registry credential") {
				t.Errorf("--role api %s: %v\n%s", flag, err, out)
			}
		}
	})
	t.Run("credentials from the environment never reach a usage message", func(t *testing.T) {
		cmd := exec.Command(bin, "--no-such-flag")
		cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://sless:hunter2-db@db:5432/sless", "PIP_INDEX_URL=https://u:hunter2-pip@pypi.example/simple",
			"NPM_REGISTRY=https://u:hunter2-npm@npm.example/")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--database-url") {
			t.Fatalf("want a usage error: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "hunter2") {
			t.Errorf("the usage message shows a credential:\n%s", out)
		}
	})
	secret := "0123456789abcdef0123456789abcdef-operator"
	os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o600)
	listen, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	cmd := exec.Command(bin, "--listen", listen, "--metrics-listen", metrics, "--public-url", "http://"+listen, "--registry", reg, "--code-dir", filepath.Join(dir, "code"),
		"--hs256-secret-file", filepath.Join(dir, "secret"), "--runtime", "python3.11="+ref.Context().Digest(d.String()).String(),
		"--registry-auth-dir", keysDir, "--loads-listen", testenv.FreeAddr(t))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig(t))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://" + listen + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator not serving:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := context.Background()
	token, _ := auth.IssueHS256([]byte(secret), "op-user", time.Hour)
	c, _ := apiclient.New("http://"+listen, token)
	if err := c.EnsureNamespace(ctx); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	if _, err := c.CreateFunction(ctx, apiv1.Function{Name: "hello", Runtime: "python3.11"}); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	z := testenv.Zip(map[string]string{"handler.py": "def handle(e): return 1\n"})
	if _, err := c.Upload(ctx, "hello", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatal(err)
	}
	var f *apiv1.Function
	for deadline := time.Now().Add(30 * time.Second); ; {
		f, _ = c.GetFunction(ctx, "hello")
		if f != nil && strings.Contains(f.Status.Image, "@sha256:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not built: %+v\n%s", f, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// --role=all: the build is counted on the API's registry, served on the metrics listener only.
	if !metricsHave(t, metrics, "", `sless_builds_total{result="succeeded"} 1`) {
		_, body := scrape(t, metrics, "")
		t.Errorf("/metrics after a build:\n%s", body)
	}
	if code, _ := scrape(t, listen, token); code != http.StatusNotFound {
		t.Errorf("the public /metrics with the tenant's token: %d, want 404", code)
	}
	// The Deployment is applied right after the status names the image, in the same reconcile.
	var dep appsv1.Deployment
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace(), Name: "hello"}, &dep)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dep.Spec.Template.Spec.Containers[0].Image != f.Status.Image {
		t.Errorf("deployment runs %s, built %s", dep.Spec.Template.Spec.Containers[0].Image, f.Status.Image)
	}

	// The namespace's pull secret pulls the function's image and pushes nothing.
	var pull corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace(), Name: "sless-registry"}, &pull); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct{ Username, Password string }
	}
	if err := json.Unmarshal(pull.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		t.Fatal(err)
	}
	cred, ok := cfg.Auths[reg]
	if !ok || cred.Username != "pull."+c.Namespace() {
		t.Fatalf("pull secret %s", pull.Data[corev1.DockerConfigJsonKey])
	}
	tenant := remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password})
	fref, _ := name.ParseReference(f.Status.Image)
	if _, err := remote.Image(fref, tenant); err != nil {
		t.Errorf("the tenant's pull secret cannot pull its function: %v", err)
	}
	if err := remote.Write(fref.Context().Tag("evil"), img, tenant); err == nil {
		t.Error("the tenant's pull secret pushed")
	}
}
