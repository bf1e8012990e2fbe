package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/internal/testenv"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
)

// Env is a running API server with the sless CRDs installed.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	env    *envtest.Environment
}

// Kubeconfig writes a kubeconfig for a cluster-admin user (for a process under test) and returns
// its path.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	return e.kubeconfig(t, envtest.User{Name: "sless-test-admin", Groups: []string{"system:masters"}})
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as service account ns/name (a
// client certificate with its user name and groups: RBAC and admission see that account) and
// returns its path.
func (e *Env) ServiceAccountKubeconfig(t testing.TB, ns, name string) string {
	t.Helper()
	return e.kubeconfig(t, envtest.User{Name: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}})
}

// ServiceAccount is a client configuration acting as service account ns/name.
func (e *Env) ServiceAccount(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.ServiceAccountKubeconfig(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (e *Env) kubeconfig(t testing.TB, user envtest.User) string {
	t.Helper()
	u, err := e.env.AddUser(user, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start runs envtest for the test's lifetime.
func Start(t testing.TB) *Env {
	t.Helper()
	e, err := start(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.env.Stop() })
	return e
}

// Shared is one envtest for a whole test binary, started on first use (so tests that do not need
// it pay nothing); the package's TestMain calls Stop. Tests sharing it keep to their own namespaces.
type Shared struct {
	mu  sync.Mutex
	env *Env
}

// Get starts the shared envtest if it is not running yet.
func (s *Shared) Get(t testing.TB) *Env {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.env == nil {
		e, err := start(t)
		if err != nil {
			t.Fatal(err)
		}
		s.env = e
	}
	return s.env
}

// Stop stops the shared envtest if it ran.
func (s *Shared) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.env != nil {
		s.env.env.Stop()
		s.env = nil
	}
}

func start(t testing.TB) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(testenv.CacheDir(), "envtest-v1.34.4")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		testenv.Missing(t, "envtest assets (hack/build-envtest.sh)", err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(testenv.ModuleRoot(), "operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	scheme := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// Scheme knows the built-in kinds and the sless CRDs.
func Scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(slessv1.AddToScheme(scheme))
	return scheme
}

// Apply creates every object of the YAML files (an object that exists is left as it is).
func (e *Env) Apply(t testing.TB, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := e.Client.Create(context.Background(), &u); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: %s %s: %v", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// Kustomized lists the files of dir/kustomization.yaml's resources.
func Kustomized(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(b, &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("%s/kustomization.yaml: no resources (%v)", dir, err)
	}
	out := make([]string, 0, len(k.Resources))
	for _, r := range k.Resources {
		out = append(out, filepath.Join(dir, r))
	}
	return out
}

// InstallRBAC applies the install's accounts, roles, bindings and admission policies
// (operator/config/rbac, at dir) with the namespace they live in (sless-system).
func (e *Env) InstallRBAC(t testing.TB, dir string) {
	t.Helper()
	if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sless-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e.Apply(t, Kustomized(t, dir)...)
}
