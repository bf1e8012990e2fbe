package k8s_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/api/codestore"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/testenv"
)

// nodeIP is where pods reach the host (the cluster's bridge address, hack/k8s/common.sh).
const nodeIP = "10.88.0.1"

// cluster is what TestMain set up for the tests.
var cluster struct {
	k1n       string // the cluster's state directory
	endpoint  string // the REST API and /fn/, on the operator Service's NodePort
	registry  string
	kube      client.Client
	kubectl   []string // kubectl with the admin kubeconfig
	key       *rsa.PrivateKey
	code      *codestore.S3
	npm       *testenv.NPMRegistry
	terraform string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(setupAndRun(m))
}

// unavailable reports a component the suite cannot run without: a failure under
// SLESS_REQUIRE_REAL=1 (make test), otherwise a loud skip.
func unavailable(what string, err error) int {
	if testenv.RequireReal() {
		fmt.Fprintf(os.Stderr, "FAIL: the real-cluster e2e needs %s: %v (SLESS_REQUIRE_REAL=1)\n", what, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "\n*** SKIPPING the real-cluster e2e: %s unavailable: %v ***\n\n", what, err)
	return 0
}

// script runs a hack/k8s script, its progress lines passed through.
func script(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(testenv.ModuleRoot(), "hack", "k8s", name)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stdout = &out
	pr, pw, _ := os.Pipe()
	cmd.Stderr = pw
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(os.Stderr, sc.Text())
		}
	}()
	start := time.Now()
	err := cmd.Run()
	pw.Close()
	fmt.Fprintf(os.Stderr, "e2e: %s took %.1f s\n", name, time.Since(start).Seconds())
	return strings.TrimSpace(out.String()), err
}

func setupAndRun(m *testing.M) int {
	if os.Geteuid() != 0 {
		return unavailable("root (the cluster sets up a bridge, iptables rules and mounts)", fmt.Errorf("euid %d", os.Geteuid()))
	}
	tf, err := testenv.Tool("terraform")
	if err != nil {
		return unavailable("the terraform CLI (hack/install-go-tools.sh terraform)", err)
	}
	minio, err := testenv.Tool("minio")
	if err != nil {
		return unavailable("minio (hack/install-go-tools.sh minio)", err)
	}
	cluster.terraform = tf
	cluster.k1n = os.Getenv("K1N")
	if cluster.k1n == "" {
		cluster.k1n = filepath.Join(testenv.CacheDir(), "k1n")
	}
	if _, err := script(nil, "build.sh"); err != nil {
		return unavailable("the Kubernetes binaries (hack/k8s/build.sh)", err)
	}
	wasUp := clusterUp(cluster.k1n)
	if _, err := script(nil, "up.sh"); err != nil {
		script(nil, "down.sh")
		return unavailable("a running cluster (hack/k8s/up.sh)", err)
	}
	if !wasUp {
		// The machine is left as it was found: the cluster goes, and every host change with it.
		defer script(nil, "down.sh")
	}

	tmp, err := os.MkdirTemp("", "sless-e2e-")
	if err != nil {
		return unavailable("a temp dir", err)
	}
	defer os.RemoveAll(tmp)
	s3, stopS3, err := testenv.StartMinIO(minio, nodeIP, tmp)
	if err != nil {
		return unavailable("MinIO on the bridge address", err)
	}
	defer stopS3()
	os.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	os.Setenv("AWS_REGION", "us-east-1")
	npm, err := testenv.StartNPMRegistry(nodeIP, testenv.NPMPackage{Name: "leftpad-sless", Version: "1.2.3",
		Files: map[string]string{"index.js": "module.exports = (s, n) => String(s).padStart(n, '0');\n"}})
	if err != nil {
		return unavailable("an npm registry on the bridge address", err)
	}
	defer npm.Close()
	cluster.npm = npm
	cluster.key, _ = rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&cluster.key.PublicKey)
	pub := filepath.Join(tmp, "jwt.pem")
	os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)

	endpoint, err := script([]string{"SLESS_S3_ENDPOINT=" + s3.Endpoint, "SLESS_JWT_PUBLIC_KEY=" + pub,
		"SLESS_NPM_REGISTRY=" + npm.URL}, "install-sless.sh")
	if err != nil {
		return unavailable("sless installed in the cluster (hack/k8s/install-sless.sh)", err)
	}
	cluster.endpoint = endpoint[strings.LastIndex(endpoint, "\n")+1:]
	env, _ := os.ReadFile(filepath.Join(cluster.k1n, "sless.env"))
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "REGISTRY="); ok {
			cluster.registry = v
		}
	}
	kubeconfig := filepath.Join(cluster.k1n, "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return unavailable("the cluster's kubeconfig", err)
	}
	cluster.kube, err = client.New(cfg, client.Options{Scheme: kubetest.Scheme()})
	if err != nil {
		return unavailable("a client of the cluster", err)
	}
	cluster.kubectl = []string{filepath.Join(testenv.CacheDir(), "k8s-v1.34.4", "bin", "kubectl"), "--kubeconfig", kubeconfig}
	cluster.code, err = codestore.NewS3(context.Background(), codestore.S3Config{Bucket: "sless-code", Endpoint: s3.Endpoint, Region: "us-east-1"})
	if err != nil {
		return unavailable("the code store", err)
	}
	return m.Run()
}

// runID keeps tenants of one run apart from those a previous run left in a kept cluster.
var runID = fmt.Sprintf("%x", time.Now().Unix()%0xfffff)

// subject is a test's tenant identity for this run.
func subject(name string) string { return name + "-" + runID + "@e2e.test" }

// token is an RS256 token for subject, signed with the key the installed API trusts.
func token(t *testing.T, subject string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": subject, "iat": time.Now().Unix(),
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString(cluster.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tenant is an API client of a fresh tenant (its own namespace), ensured.
func tenant(t *testing.T, subject string) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(cluster.endpoint, token(t, subject))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNamespace(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(cluster.kubectl[0], append(cluster.kubectl[1:], args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterUp reports whether a cluster already answers on this state directory (then the suite
// leaves it running, as it found it).
func clusterUp(k1n string) bool {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(k1n, "admin.kubeconfig"))
	if err != nil {
		return false
	}
	cfg.Timeout = 2 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
	return err == nil && string(body) == "ok"
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
