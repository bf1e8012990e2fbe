package runtimes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/internal/testenv"
)

// TestExamplesInPodman is the whole builder path for real, for every language runtime: the language
// bases from hack/ (Debian packages; node from the npm registry), `sless runtime build` onto them,
// `sless build` of examples/hello-*, then each image run by podman and answered over HTTP.
func TestExamplesInPodman(t *testing.T) {
	podman := testenv.NewPodman(t)
	reg := testenv.Registry(t)
	sless := buildSless(t)
	for _, tc := range []struct {
		runtime, example string
	}{
		{"python3.11", "hello-python"},
		{"python3.13", "hello-python"},
		{"nodejs20", "hello-node"},
		{"nodejs22", "hello-node"},
		{"nodejs24", "hello-node"},
		{"provided", "hello-go"},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			ctx := context.Background()
			base := filepath.Join(testenv.CacheDir(), "bases", tc.runtime)
			if _, err := os.Stat(filepath.Join(base, "index.json")); err != nil {
				testenv.Missing(t, "the "+tc.runtime+" base image (hack/build-bases.sh "+tc.runtime+")", err)
			}
			baseRef := reg + "/sless/base-" + tc.runtime + ":latest"
			pushLayout(t, base, baseRef)

			runtimeRef := run(t, sless, "runtime", "build", "--quiet", "--runtime", tc.runtime, "--base", baseRef, "--to", reg+"/sless/runtime-"+tc.runtime+":latest")
			src, _ := filepath.Abs(filepath.Join("..", "examples", tc.example, "code"))
			if tc.runtime == "provided" {
				src = buildBootstrap(t, tc.example)
			}
			image := run(t, sless, "build", "--quiet", "--runtime-image", runtimeRef, "--src", src, "--handler", "handler.handle",
				"--function", tc.example, "--namespace", "test", "--runtime", tc.runtime, "--to", reg+"/fn/"+tc.example+"-"+tc.runtime+":latest")
			if !strings.Contains(image, "@sha256:") {
				t.Fatalf("sless build printed %q", image)
			}
			size := imageSize(t, image)

			// Pull first (untimed, the base is large), then time container start → first 200.
			if out, err := podman.Command(ctx, "pull", "-q", "--tls-verify=false", image).CombinedOutput(); err != nil {
				t.Fatalf("podman pull: %v\n%s", err, out)
			}
			port := testenv.FreePort(t)
			cname := fmt.Sprintf("sless-test-%s-%d", tc.example, port)
			startAt := time.Now()
			args := append([]string{"run", "-d", "--rm", "--name", cname}, testenv.PodmanRunFlags...)
			args = append(args, "-e", fmt.Sprintf("PORT=%d", port), "-e", "HOST=127.0.0.1", image)
			if out, err := podman.Command(ctx, args...).CombinedOutput(); err != nil {
				t.Fatalf("podman run: %v\n%s", err, out)
			}
			t.Cleanup(func() { podman.Command(context.Background(), "rm", "-f", "-t", "1", cname).Run() })
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			var body []byte
			for {
				resp, err := http.Get(url + "/?name=sless")
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				if time.Since(startAt) > 30*time.Second {
					logs, _ := podman.Command(ctx, "logs", cname).CombinedOutput()
					t.Fatalf("no 200 within 30 s: %v\n%s", err, logs)
				}
				time.Sleep(10 * time.Millisecond)
			}
			coldStart := time.Since(startAt)
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil || m["message"] != "hello, sless" || m["path"] != "/" {
				t.Fatalf("response %s", body)
			}
			// The code is read-only to the function user (65532), and the process runs as that user.
			out, err := podman.Command(ctx, "exec", cname, "sh", "-c", "id -u; touch /app/function/x 2>&1 || echo read-only").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "65532\n") || !strings.Contains(string(out), "read-only") {
				t.Errorf("uid / read-only check: %v %q", err, out)
			}
			// The image runs the runtime's own interpreter (its base), not another release.
			// provided has no language: neither interpreter is in its image.
			version, want := `python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])'`, tc.runtime
			switch {
			case strings.HasPrefix(tc.runtime, "nodejs"):
				version = `node -p '"nodejs" + process.versions.node.split(".")[0]'`
			case tc.runtime == "provided":
				version, want = `command -v python3 node || echo none`, "none"
			}
			if out, err := podman.Command(ctx, "exec", cname, "sh", "-c", version).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != want {
				t.Errorf("the %s image's interpreter: %v %q", tc.runtime, err, out)
			}
			// Per-request cost through the runtime server on loopback.
			var ds []time.Duration
			client := &http.Client{}
			for i := 0; i < 200; i++ {
				s := time.Now()
				resp, err := client.Get(url + "/")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(s))
			}
			slices.Sort(ds)
			t.Logf("%s: image %.1f MB compressed; cold start (podman run → first 200) %d ms; request p50 %d µs, p99 %d µs",
				tc.runtime, float64(size)/1e6, coldStart.Milliseconds(), ds[len(ds)/2].Microseconds(), ds[len(ds)*99/100].Microseconds())
		})
	}
}

// buildBootstrap builds examples/<example>/src (a provided function's Go server) with the
// machine's Go into a fresh code directory as its executable bootstrap; it returns the directory.
func buildBootstrap(t *testing.T, example string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bootstrap"), ".")
	cmd.Dir, cmd.Env = filepath.Join("..", "examples", example, "src"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", example, err, out)
	}
	return dir
}

func buildSless(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sless")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/sless").CombinedOutput(); err != nil {
		t.Fatalf("building sless: %v\n%s", err, out)
	}
	return bin
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("sless %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

func pushLayout(t *testing.T, dir, ref string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := p.ImageIndex()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

func imageSize(t *testing.T, ref string) int64 {
	r, _ := name.ParseReference(ref)
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}
