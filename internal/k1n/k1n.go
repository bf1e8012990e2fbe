package k1n

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-containerregistry/pkg/authn"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/faultproxy"
	"github.com/sless-dev/sless/internal/kubetest"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/internal/testenv"
)

// NodeIP is where pods reach the host (the cluster's bridge address, hack/k8s/common.sh).
const NodeIP = "10.88.0.1"

// EgressAllowedSubject is the tenant whose namespace the install allows to reach
// Env.EgressAllowed (sless-operator --egress-allow NAMESPACE=CIDR:PORT): an in-cluster database's
// stand-in, which no other namespace reaches.
const EgressAllowedSubject = "egress-allowed@e2e.test"

// BrokerSubject is the tenant whose namespace the install lets reach Env.Broker (and no other
// namespace does): where a test's message broker is reached from pods.
const BrokerSubject = "rabbitmq@e2e.test"

// Env is a running cluster with sless installed.
type Env struct {
	Dir      string // the cluster's state directory ($K1N)
	Endpoint string // the REST API and /fn/, on the operator Service's NodePort
	Registry string // where function images go (host:port): the proxy in front of the cluster's registry
	// RegistryFaults is that proxy: it refuses pushes while a test makes it fail.
	RegistryFaults *faultproxy.Proxy
	// RegistryDirect is the cluster's registry itself (host:port), behind the proxy.
	RegistryDirect string
	// RegistryAuth is the platform's credential for Registry (which serves nothing anonymously).
	RegistryAuth authn.Authenticator
	// RegistryKeys derive every other identity's credential (regauth).
	RegistryKeys *regauth.Keys
	Kube         client.Client
	KubeConfig   *rest.Config         // Kube's: the cluster's admin
	Kubectl      []string             // kubectl with the admin kubeconfig
	Code         *codestore.S3        // the code store the operator uses
	S3Endpoint   string               // MinIO's URL (on the bridge address)
	S3           *testenv.MinIOServer // that MinIO, to stop and start (an outage)
	NPM          *testenv.NPMRegistry // an npm registry on the bridge address serving leftpad-sless
	PIP          *testenv.PipIndex    // a pip index on the bridge address (empty until a test adds to it)
	NPMSecret    string               // NPM's and PIP's password, which only the operator (its index proxy) is given
	// Postgres keeps the invocation history (on the bridge address; the API's DATABASE_URL).
	Postgres *testenv.Postgres
	// EgressAllowed is a server on the node address (port picked at run time) that the install
	// lets EgressAllowedSubject's namespace reach, and only it: it answers 200 to anything.
	EgressAllowed net.Listener
	// Broker is a listener on the node address (port picked at run time) that only
	// BrokerSubject's namespace may reach: a test forwards what it accepts to its own broker
	// (which listens on 127.0.0.1, out of pods' reach).
	Broker  net.Listener
	key     *rsa.PrivateKey
	log     io.Writer
	closers []func()
}

// MissingError is a component the environment cannot run without.
type MissingError struct {
	What string
	Err  error
}

func (e *MissingError) Error() string { return e.What + ": " + e.Err.Error() }

// Start builds what is missing (cached), brings the cluster up (unless it is up already), starts
// MinIO and the npm mirror on the bridge address and installs sless. Progress goes to log.
func Start(log io.Writer) (_ *Env, err error) {
	e := &Env{log: log}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if os.Geteuid() != 0 {
		return nil, &MissingError{"root (the cluster sets up a bridge, iptables rules and mounts)", fmt.Errorf("euid %d", os.Geteuid())}
	}
	minio, err := testenv.Tool("minio")
	if err != nil {
		return nil, &MissingError{"minio (hack/install-go-tools.sh minio)", err}
	}
	e.Dir = os.Getenv("K1N")
	if e.Dir == "" {
		e.Dir = filepath.Join(testenv.CacheDir(), "k1n")
	}
	if _, err := e.script(nil, "build.sh"); err != nil {
		return nil, &MissingError{"the Kubernetes binaries (hack/k8s/build.sh)", err}
	}
	// A cluster an earlier run of this package started (and did not stop: killed) is ours to stop;
	// one that was up before any of our runs is left running, as found.
	owned := filepath.Join(e.Dir, ".started-by-k1n")
	if _, err := os.Stat(owned); err == nil || !up(e.Dir) {
		if err := os.MkdirAll(e.Dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(owned, nil, 0o644); err != nil {
			return nil, err
		}
		e.closers = append(e.closers, func() { os.Remove(owned) })
		// Registered first, so it runs last: the cluster goes, and every host change with it; its
		// state too, so the next run starts clean instead of with this run's tenants still running.
		e.closers = append(e.closers, func() { e.script(nil, "down.sh", "--wipe") })
	}
	if _, err := e.script(nil, "up.sh"); err != nil {
		return nil, &MissingError{"a running cluster (hack/k8s/up.sh)", err}
	}

	tmp, err := os.MkdirTemp("", "sless-k1n-")
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(tmp) })
	if e.S3, err = testenv.NewMinIO(minio, NodeIP, tmp); err != nil {
		return nil, &MissingError{"MinIO on the bridge address", err}
	}
	e.closers = append(e.closers, e.S3.Stop)
	s3 := e.S3.S3Server
	e.S3Endpoint = s3.Endpoint
	e.NPM, err = testenv.StartNPMRegistry(NodeIP, testenv.NPMPackage{Name: "leftpad-sless", Version: "1.2.3",
		Files: map[string]string{"index.js": "module.exports = (s, n) => String(s).padStart(n, '0');\n"}})
	if err != nil {
		return nil, &MissingError{"an npm registry on the bridge address", err}
	}
	e.closers = append(e.closers, e.NPM.Close)
	// The registry wants a credential only the operator's index proxy holds.
	pw := make([]byte, 12)
	rand.Read(pw)
	e.NPMSecret = fmt.Sprintf("%x", pw)
	npmURL := e.NPM.RequireBasicAuth("ci", e.NPMSecret)
	if e.PIP, err = testenv.StartPipIndex(NodeIP); err != nil {
		return nil, &MissingError{"a pip index on the bridge address", err}
	}
	e.closers = append(e.closers, e.PIP.Close)
	pipURL := e.PIP.RequireBasicAuth("ci", e.NPMSecret)
	// Its own directory: the server runs as the postgres user, which cannot enter tmp (0700).
	pgDir, err := os.MkdirTemp("", "sless-k1n-pg-")
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(pgDir) })
	if e.Postgres, err = testenv.StartPostgres(NodeIP, pgDir); err != nil {
		return nil, &MissingError{"PostgreSQL on the bridge address (Debian package postgresql)", err}
	}
	e.closers = append(e.closers, func() { e.Postgres.Close() })
	// Function images go through a proxy in front of the registry that a test can make refuse
	// pushes (a registry outage); containerd learns it speaks plain HTTP. The node's own images
	// (pause, coredns, sless's) come from the registry directly.
	port, err := os.ReadFile(filepath.Join(e.Dir, "registry.port"))
	if err != nil {
		return nil, err
	}
	e.RegistryDirect = net.JoinHostPort(NodeIP, strings.TrimSpace(string(port)))
	e.RegistryFaults, err = faultproxy.Start(NodeIP, "http://"+e.RegistryDirect,
		faultproxy.WithMethods(http.MethodPost, http.MethodPut, http.MethodPatch), faultproxy.WithStatus(http.StatusServiceUnavailable))
	if err != nil {
		return nil, &MissingError{"a proxy in front of the registry", err}
	}
	e.closers = append(e.closers, func() { e.RegistryFaults.Close() })
	hosts := filepath.Join(e.Dir, "containerd", "certs.d", e.RegistryFaults.Addr())
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return nil, err
	}
	toml := fmt.Sprintf("server = %q\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", e.RegistryFaults.URL(), e.RegistryFaults.URL())
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(toml), 0o644); err != nil {
		return nil, err
	}
	if e.EgressAllowed, err = net.Listen("tcp", net.JoinHostPort(NodeIP, "0")); err != nil {
		return nil, &MissingError{"a listener on the bridge address", err}
	}
	e.closers = append(e.closers, func() { e.EgressAllowed.Close() })
	go http.Serve(e.EgressAllowed, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "allowed\n") }))
	if e.Broker, err = net.Listen("tcp", net.JoinHostPort(NodeIP, "0")); err != nil {
		return nil, &MissingError{"a listener on the bridge address", err}
	}
	e.closers = append(e.closers, func() { e.Broker.Close() })
	allowed := apiv1.NamespaceFor(EgressAllowedSubject) + "=" + NodeIP + "/32:" + fmt.Sprint(e.EgressAllowed.Addr().(*net.TCPAddr).Port) +
		"," + apiv1.NamespaceFor(BrokerSubject) + "=" + NodeIP + "/32:" + fmt.Sprint(e.Broker.Addr().(*net.TCPAddr).Port)
	e.key, _ = rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&e.key.PublicKey)
	pub := filepath.Join(tmp, "jwt.pem")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	out, err := e.script([]string{"SLESS_S3_ENDPOINT=" + s3.Endpoint, "SLESS_JWT_PUBLIC_KEY=" + pub, "SLESS_NPM_REGISTRY=" + npmURL, "SLESS_PIP_INDEX_URL=" + pipURL,
		"SLESS_DATABASE_URL=" + e.Postgres.URL, "SLESS_EGRESS_ALLOW=" + allowed,
		"SLESS_FUNCTION_REGISTRY=" + e.RegistryFaults.Addr(),
		"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}, "install-sless.sh")
	if err != nil {
		return nil, &MissingError{"sless installed in the cluster (hack/k8s/install-sless.sh)", err}
	}
	e.Endpoint = out[strings.LastIndex(out, "\n")+1:]
	env, _ := os.ReadFile(filepath.Join(e.Dir, "sless.env"))
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "REGISTRY="); ok {
			e.Registry = v
		}
	}
	if e.RegistryKeys, err = regauth.Load(filepath.Join(e.Dir, "registry-auth")); err != nil {
		return nil, err
	}
	e.RegistryAuth = e.RegistryKeys.Platform().Authenticator()
	kubeconfig := filepath.Join(e.Dir, "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	e.KubeConfig = cfg
	if e.Kube, err = client.New(cfg, client.Options{Scheme: kubetest.Scheme()}); err != nil {
		return nil, err
	}
	e.Kubectl = []string{filepath.Join(e.Dir, "bin", "kubectl"), "--kubeconfig", kubeconfig}
	e.Code, err = codestore.NewS3(context.Background(), codestore.S3Config{Bucket: "sless-code", Endpoint: s3.Endpoint,
		Region: "us-east-1", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops what Start started, the cluster last (if Start brought it up).
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// Token is an RS256 token for subject, signed with the key the installed API trusts.
func (e *Env) Token(subject string) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": subject, "iat": time.Now().Unix(),
		"exp": time.Now().Add(2 * time.Hour).Unix()}).SignedString(e.key)
}

// script runs a hack/k8s script, passing its progress lines through; it returns stdout.
func (e *Env) script(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(testenv.ModuleRoot(), "hack", "k8s", name)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stdout = &out
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(e.log, sc.Text())
		}
		close(done)
	}()
	start := time.Now()
	err := cmd.Run()
	pw.Close()
	<-done
	fmt.Fprintf(e.log, "k1n: %s took %.1f s\n", name, time.Since(start).Seconds())
	return strings.TrimSpace(out.String()), err
}

// up reports whether a cluster already answers on this state directory.
func up(dir string) bool {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "admin.kubeconfig"))
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

// ServiceAccount is a client acting as service account ns/name (the admin impersonates it, with
// the groups the API server gives a service account's token), for what RBAC and admission let
// that account do.
func (e *Env) ServiceAccount(ns, name string) (client.Client, error) {
	cfg := rest.CopyConfig(e.KubeConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	return client.New(cfg, client.Options{Scheme: kubetest.Scheme()})
}
