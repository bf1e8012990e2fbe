package k8s_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/k1n"
	"github.com/sless-dev/sless/internal/testenv"
)

// cluster is the cluster with sless installed, and the Terraform CLI.
var cluster struct {
	*k1n.Env
	terraform string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(setupAndRun(m))
}

// missing is what the suite could not start without; every test then skips loudly, or fails under
// SLESS_REQUIRE_REAL=1 (make test), so no run says "ok" having tested nothing silently.
var missing struct {
	what string
	err  error
}

func unavailable(m *testing.M, what string, err error) int {
	missing.what, missing.err = what, err
	fmt.Fprintf(os.Stderr, "\n*** the real-cluster e2e cannot run: %s unavailable: %v ***\n\n", what, err)
	return m.Run()
}

// needCluster is the first step of every test: skip (fail under SLESS_REQUIRE_REAL=1) without one.
func needCluster(t *testing.T) {
	t.Helper()
	if missing.err != nil {
		testenv.Missing(t, missing.what, missing.err)
	}
}

func setupAndRun(m *testing.M) int {
	tf, err := testenv.Tool("terraform")
	if err != nil {
		return unavailable(m, "the terraform CLI (hack/install-go-tools.sh terraform)", err)
	}
	cluster.terraform = tf
	env, err := k1n.Start(os.Stderr)
	if err != nil {
		var me *k1n.MissingError
		if errors.As(err, &me) {
			return unavailable(m, me.What, me.Err)
		}
		return unavailable(m, "the cluster", err)
	}
	defer env.Close()
	cluster.Env = env
	code := m.Run()
	if code != 0 {
		// What the operator went through, before the cluster goes.
		for _, args := range [][]string{{"-n", "sless-system", "get", "pods", "-o", "wide"},
			{"-n", "sless-system", "logs", "-l", "app.kubernetes.io/part-of=sless", "--prefix", "--previous", "--tail=40"},
			{"-n", "sless-system", "logs", "-l", "app.kubernetes.io/part-of=sless", "--prefix", "--tail=40"}} {
			out, _ := exec.Command(env.Kubectl[0], append(env.Kubectl[1:], args...)...).CombinedOutput()
			fmt.Fprintf(os.Stderr, "--- kubectl %s\n%s\n", strings.Join(args, " "), out)
		}
	}
	return code
}

// runID keeps tenants of one run apart from those a previous run left in a kept cluster.
var runID = fmt.Sprintf("%x", time.Now().Unix()%0xfffff)

// subject is a test's tenant identity for this run.
func subject(name string) string { return name + "-" + runID + "@e2e.test" }

// token is an RS256 token for subject, signed with the key the installed API trusts.
func token(t *testing.T, subject string) string {
	t.Helper()
	s, err := cluster.Token(subject)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tenant is an API client of a fresh tenant (its own namespace), ensured.
func tenant(t *testing.T, subject string) *apiclient.Client {
	t.Helper()
	needCluster(t)
	c, err := apiclient.New(cluster.Endpoint, token(t, subject))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureNamespace(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The tenant goes with the test (its functions' finalizers clean code and images), so a kept
	// cluster does not accumulate running pods and firing cron triggers from run to run.
	t.Cleanup(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace()}}
		if err := cluster.Kube.Delete(context.Background(), ns); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting the tenant's namespace: %v", err)
		}
	})
	return c
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(cluster.Kubectl[0], append(cluster.Kubectl[1:], args...)...).CombinedOutput()
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

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
