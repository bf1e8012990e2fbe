package local_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// A deleted namespace's range of host uids goes to a new tenant once no container of it is left,
// and never while one is (running or stopped): two tenants never share a uid.
func TestUIDRangesReusedOnceContainersAreGone(t *testing.T) {
	podman := testenv.NewPodman(t)
	dataDir := t.TempDir()
	u := startUp(t, dataDir, "", "")
	ctx := context.Background()
	containersOf := func(ns string, filters ...string) []string {
		args := []string{"ps", "-a", "--filter", "label=sless.dev/namespace=" + ns, "--format", "{{.Names}}"}
		for _, f := range filters {
			args = append(args, "--filter", f)
		}
		return strings.Fields(string(mustOutput(t, podman.Command(ctx, args...))))
	}
	// hostBase is the start of the host uid range fn's running container uses: its process runs as
	// container user 65532.
	hostBase := func(c *client.Client, fn string) int {
		t.Helper()
		names := containersOf(c.Namespace(), "label=sless.dev/function="+fn, "status=running")
		if len(names) == 0 {
			t.Fatalf("no running container of %s", fn)
		}
		pid := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "inspect", names[0], "--format", "{{.State.Pid}}"))))
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
				var uid int
				fmt.Sscan(f[1], &uid)
				return uid - 65532
			}
		}
		t.Fatalf("no Uid in /proc/%s/status", pid)
		return 0
	}
	deploy := func(sub, fn string) (*client.Client, *apiv1.Function, int) {
		t.Helper()
		c := otherTenant(t, u, sub)
		if _, err := c.CreateFunction(ctx, apiv1.Function{Name: fn, Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		z := testenv.Zip(map[string]string{"handler.py": "def handle(e):\n    return 'hi'\n"})
		if _, err := c.Upload(ctx, fn, strings.NewReader(string(z)), int64(len(z))); err != nil {
			t.Fatal(err)
		}
		var f *apiv1.Function
		waitFor(t, 90*time.Second, func() bool {
			f, _ = c.GetFunction(ctx, fn)
			return f != nil && (f.Status.Phase == apiv1.PhaseReady || f.Status.Phase == apiv1.PhaseFailed)
		}, fn+" Ready")
		if f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("%s: %+v\n%s", fn, f.Status, u.logTail())
		}
		return c, f, hostBase(c, fn)
	}

	a, fa, baseA := deploy("uid-a@example.com", "f")
	if err := a.DeleteFunction(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { return len(containersOf(a.Namespace())) == 0 }, "the deleted function's containers to go")
	if err := a.DeleteNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	// A stopped container of the deleted namespace is left (as one still being removed would be).
	sum := sha256.Sum256([]byte(dataDir))
	left := "sless-test-left-" + a.Namespace()
	if out, err := podman.Command(ctx, "create", "--name", left, "--label", "sless.dev/instance="+hex.EncodeToString(sum[:])[:12],
		"--label", "sless.dev/namespace="+a.Namespace(), "--label", "sless.dev/role=function", "--label", "sless.dev/function=f",
		"--entrypoint", "true", fa.Status.Image).CombinedOutput(); err != nil {
		t.Fatalf("creating the leftover: %v %s", err, out)
	}
	t.Cleanup(func() { podman.Command(context.Background(), "rm", "-f", "-t", "0", left).Run() })

	_, _, baseB := deploy("uid-b@example.com", "g")
	if baseB == baseA {
		t.Fatalf("a new tenant got host uids %d… while a container of the deleted namespace that had them is left", baseA)
	}
	if out, err := podman.Command(ctx, "rm", "-f", "-t", "0", left).CombinedOutput(); err != nil {
		t.Fatalf("removing the leftover: %v %s", err, out)
	}
	_, _, baseC := deploy("uid-c@example.com", "h")
	if baseC != baseA {
		t.Errorf("the next tenant got host uids %d…, want the deleted namespace's %d… (nothing of it is left; b has %d…)", baseC, baseA, baseB)
	}
	t.Logf("host uid ranges: a %d (deleted), b %d, c %d", baseA, baseB, baseC)
}
