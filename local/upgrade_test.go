package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// An upgrade of sless up keeps running functions: a data dir and a container left by the version
// before spec and status were apart (state schema 1, container labels dev.sless.*, the host's
// network) are taken over by the new one. The container serves at once (no rebuild, no new image)
// and is then replaced by one on the instance's own network, beside it: /fn/ answers every
// request from the moment the new process is ready.
func TestUpgradeAdoptsAnEarlierVersion(t *testing.T) {
	podman := testenv.NewPodman(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	u := startUp(t, dataDir, "", "")
	listen, regAddr, ns := u.Listen, u.RegAddr, u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "1", "-a", "--filter", "label=dev.sless.namespace="+ns).Run()
	})
	f := u.deploy(t, "legacy", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return {'v': 'legacy'}\n"})
	if f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("deploy: %+v", f.Status)
	}
	cname := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "--filter", "label=sless.dev/function=legacy", "--format", "{{.Names}}"))))
	var inspected []struct {
		Config struct {
			Env    []string
			Labels map[string]string
		}
	}
	if err := json.Unmarshal(mustOutput(t, podman.Command(ctx, "inspect", cname)), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("inspect %s: %v", cname, err)
	}
	labels := inspected[0].Config.Labels
	u.stop()

	// What the earlier version left: its state file, and its container with its labels.
	writeEarlierState(t, filepath.Join(dataDir, "state.db"), ns, f)
	mustOutput(t, podman.Command(ctx, "rm", "-f", "-t", "0", cname))
	args := []string{"run", "-d", "--name", cname}
	for k, v := range map[string]string{"dev.sless.instance": labels["sless.dev/instance"], "dev.sless.namespace": ns, "dev.sless.function": "legacy",
		"dev.sless.port": labels["sless.dev/port"], "dev.sless.role": "function"} {
		args = append(args, "--label", k+"="+v)
	}
	// The earlier version put the user's variables on the command line (no SLESS_ENV_FILE).
	for _, e := range inspected[0].Config.Env {
		if !strings.HasPrefix(e, "SLESS_ENV_FILE=") && !strings.HasPrefix(e, "SLESS_ENV_SH=") {
			args = append(args, "-e", e)
		}
	}
	for k, v := range f.EnvVars {
		args = append(args, "-e", k+"="+v)
	}
	args = append(append(args, testenv.PodmanRunFlags...), f.Status.Image)
	oldID := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, args...))))

	u = startUp(t, dataDir, listen, regAddr)
	var sent, failed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // callers from the moment the new process is ready
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			code, body := u.get("/fn/" + ns + "/legacy")
			sent.Add(1)
			if code != 200 || !strings.Contains(body, "legacy") {
				failed.Add(1)
				t.Logf("request %d: %d %s", sent.Load(), code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	waitFor(t, 30*time.Second, func() bool {
		g, err := u.c.GetFunction(ctx, "legacy")
		return err == nil && g.Status.Phase == apiv1.PhaseReady && g.Status.Message == ""
	}, "the function Ready on the new version")
	// Long enough for the controller to have reconciled it (it resyncs every 30 s; the first
	// reconcile runs at start), and a few dozen requests.
	waitFor(t, 10*time.Second, func() bool { return sent.Load() >= 50 }, "50 requests")
	close(stop)
	<-done
	t.Logf("after the upgrade: %d requests, %d failed", sent.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed after the upgrade", failed.Load(), sent.Load())
	}
	g, _ := u.c.GetFunction(ctx, "legacy")
	if g.Status.Image != f.Status.Image || g.Status.CodeSHA256 != f.Status.CodeSHA256 {
		t.Errorf("after the upgrade %+v, before %+v", g.Status, f.Status)
	}
	// The host-network container made way for one on the instance's network.
	waitFor(t, 20*time.Second, func() bool {
		return strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "-a", "--filter", "id="+oldID, "--format", "{{.ID}}")))) == ""
	}, "the earlier container to be replaced")
	nets := strings.TrimSpace(string(mustOutput(t, podman.Command(ctx, "ps", "--filter", "label=sless.dev/function=legacy", "--format", "{{.Networks}}"))))
	if !strings.HasPrefix(nets, "sless-") || strings.Contains(nets, "\n") {
		t.Errorf("the function's containers are on %q, want one on the instance's network", nets)
	}
	code, metrics := u.Metrics("")
	if code != 200 || !strings.Contains(metrics, "sless_builds_total{") {
		t.Fatalf("/metrics: %d %.300s", code, metrics)
	}
	for _, line := range strings.Split(metrics, "\n") {
		// Both results are listed from the start, at 0.
		if strings.HasPrefix(line, "sless_builds_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("the upgrade built again: %s", line)
		}
	}
	u.stop()
}

// writeEarlierState rewrites the state file as sless up wrote it before spec and status were apart
// (schema 1): each object one apiv1 JSON value, the code's hash in its status, and the build record
// naming its inputs.
func writeEarlierState(t *testing.T, path, ns string, f *apiv1.Function) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var runtimeRef string
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("meta")); err != nil {
			return err
		}
		var b struct {
			Images []string `json:"images"`
		}
		if err := json.Unmarshal(tx.Bucket([]byte("builds")).Get([]byte(ns+"/legacy")), &b); err != nil {
			return err
		}
		// The runtime image the function was built on, as the image says.
		runtimeRef = imageLabel(t, f.Status.Image, "org.opencontainers.image.base.name")
		old := *f
		old.Status.URL = "http://old/fn/" + ns + "/legacy"
		for bucket, v := range map[string]any{
			"functions": old,
			"builds": map[string]any{"code_sha256": f.Status.CodeSHA256, "runtime": f.Runtime, "entrypoint": f.Entrypoint,
				"runtime_ref": runtimeRef, "image": f.Status.Image, "images": b.Images},
		} {
			raw, _ := json.Marshal(v)
			if err := tx.Bucket([]byte(bucket)).Put([]byte(ns+"/legacy"), raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(runtimeRef, "@sha256:") {
		t.Fatalf("runtime reference %q", runtimeRef)
	}
}

func imageLabel(t *testing.T, image, label string) string {
	t.Helper()
	out := mustOutput(t, testenv.NewPodman(t).Command(context.Background(), "image", "inspect", image, "--format", fmt.Sprintf("{{index .Labels %q}}", label)))
	return strings.TrimSpace(string(out))
}
