package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

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
	u, err := e.env.AddUser(envtest.User{Name: "sless-test-admin", Groups: []string{"system:masters"}}, nil)
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
