package local_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// zfile is one entry of modeZip, with its Unix mode (os.ModeSymlink: body is the target).
type zfile struct {
	name string
	body []byte
	mode os.FileMode
}

func modeZip(t *testing.T, files ...zfile) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate}
		h.SetMode(f.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(f.body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// helloGo builds examples/hello-go with the machine's Go: a static binary, as its README says.
func helloGo(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir, cmd.Env = filepath.Join(testenv.ModuleRoot(), "examples", "hello-go", "src"), append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building hello-go: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deployZip creates a provided function (GREETING=hi) and uploads z; it waits for Ready or Failed.
func (u *up) deployZip(t *testing.T, name string, z []byte) *apiv1.Function {
	t.Helper()
	ctx := context.Background()
	if _, err := u.c.GetFunction(ctx, name); client.IsNotFound(err) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: name, Runtime: apiv1.RuntimeProvided, MemoryMB: 64,
			EnvVars: map[string]string{"GREETING": "hi", "QUOTED": `it's "$(id)"`}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := u.c.Upload(ctx, name, bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	return u.waitCode(t, name, res.CodeSHA256)
}

// TestProvided runs bring-your-own-binary functions on a real sless up: the hello-go example's
// static binary as bootstrap, a #!/bin/sh bootstrap that execs it, job mode, and what a hostile
// upload tries (a symlink or setuid bootstrap, one that listens elsewhere, one that exits at once).
func TestProvided(t *testing.T) {
	podman := testenv.NewPodman(t)
	u := startUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "1", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})
	bin := helloGo(t)
	call := func(t *testing.T, name, path string) map[string]any {
		t.Helper()
		code, body := u.get("/fn/" + ns + "/" + name + path)
		var m map[string]any
		if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
			t.Fatalf("/fn/%s%s: %d %s", name, path, code, body)
		}
		return m
	}

	t.Run("static binary", func(t *testing.T) {
		// A package.json beside it is just a file: no npm install for provided.
		f := u.deployZip(t, "gobin", modeZip(t, zfile{"bootstrap", bin, 0o755}, zfile{"package.json", []byte(`{"dependencies":{"left-pad":"1.3.0"}}`), 0o644}))
		if f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("status %+v\n%s", f.Status, u.logTail())
		}
		m := call(t, "gobin", "/any/where?name=you")
		if m["message"] != "hi, you" || m["path"] != "/any/where" || m["uid"] != float64(65532) || m["euid"] != float64(65532) {
			t.Errorf("answer %v", m)
		}
		if f.Status.Build == nil || f.Status.Build.DepsKey != "" {
			t.Errorf("a dependency layer for provided: %+v", f.Status.Build)
		}
		var buildLog []string
		u.c.Logs(ctx, "gobin", client.LogsOptions{Source: apiv1.LogSourceBuild}, func(l apiv1.LogLine) error { buildLog = append(buildLog, l.Line); return nil })
		if joined := strings.Join(buildLog, "\n"); strings.Contains(joined, "dependencies") || !strings.Contains(joined, "built ") {
			t.Errorf("build log:\n%s", joined)
		}
		// Its own log lines reach …/logs as the language servers' do.
		waitFor(t, 10*time.Second, func() bool {
			found := false
			u.c.Logs(ctx, "gobin", client.LogsOptions{}, func(l apiv1.LogLine) error {
				found = found || strings.Contains(l.Line, `"path":"/any/where"`)
				return nil
			})
			return found
		}, "the bootstrap's request log line")
	})

	t.Run("job mode", func(t *testing.T) {
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "gosum", FunctionRef: "gobin", EventJSON: `{"input":[100,200,300]}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, u, "gosum", 1); j.Status.Phase != apiv1.JobSucceeded || j.Status.Message != `{"sum":600}` {
			t.Errorf("job %+v", j.Status)
		}
		if _, err := u.c.PutJob(ctx, apiv1.Job{Name: "gosum", FunctionRef: "gobin", EventJSON: `{"input":["x"]}`, RunID: 2}); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, u, "gosum", 2); j.Status.Phase != apiv1.JobFailed || !strings.Contains(j.Status.Message, "not a number") {
			t.Errorf("failing job %+v", j.Status)
		}
	})

	t.Run("shell script bootstrap", func(t *testing.T) {
		// The base's /bin/sh runs it; the user's env vars (from the env file) are set before it runs.
		script := "#!/bin/sh\nexport GREETING=\"$GREETING from sh ($QUOTED)\"\nexec /app/function/hello \"$@\"\n"
		f := u.deployZip(t, "gosh", modeZip(t, zfile{"bootstrap", []byte(script), 0o755}, zfile{"hello", bin, 0o755}))
		if f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("status %+v\n%s", f.Status, u.logTail())
		}
		if m := call(t, "gosh", "/?name=sh"); m["message"] != `hi from sh (it's "$(id)"), sh` {
			t.Errorf("answer %v", m)
		}
	})

	t.Run("symlink bootstrap", func(t *testing.T) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "golink", Runtime: apiv1.RuntimeProvided}); err != nil {
			t.Fatal(err)
		}
		z := modeZip(t, zfile{"bootstrap", []byte("/bin/sh"), os.ModeSymlink | 0o777})
		_, err := u.c.Upload(ctx, "golink", bytes.NewReader(z), int64(len(z)))
		var ae *apiv1.Error
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != apiv1.CodeInvalidArchive || !strings.Contains(ae.Message, "bootstrap") {
			t.Fatalf("upload of a symlink bootstrap: %v", err)
		}
		if f, _ := u.c.GetFunction(ctx, "golink"); f.Status.CodeSHA256 != "" || f.Status.Phase != apiv1.PhasePending {
			t.Errorf("status after a refused upload: %+v", f.Status)
		}
	})

	t.Run("setuid bootstrap", func(t *testing.T) {
		// Mode 4755 in the zip: the layer keeps 0755, and the process runs as the function's user.
		f := u.deployZip(t, "gosuid", modeZip(t, zfile{"bootstrap", bin, os.ModeSetuid | os.ModeSetgid | 0o755}))
		if f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("status %+v", f.Status)
		}
		if m := call(t, "gosuid", "/"); m["exe_mode"] != "-rwxr-xr-x" || m["euid"] != float64(65532) {
			t.Errorf("setuid kept: %v", m)
		}
	})

	t.Run("exits at once", func(t *testing.T) {
		script := "#!/bin/sh\necho 'provided-test: cannot start, no config' >&2\nexit 3\n"
		f := u.deployZip(t, "goexit", modeZip(t, zfile{"bootstrap", []byte(script), 0o755}))
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "cannot start, no config") || !strings.Contains(f.Status.Message, "exited") {
			t.Errorf("status %+v", f.Status)
		}
	})

	t.Run("listens elsewhere", func(t *testing.T) {
		// Serves, but on 9090 rather than $PORT: the health check never answers, and after 60 s
		// the start fails saying so (the function is Failed, not Starting forever).
		script := "#!/bin/sh\nPORT=9090 exec /app/function/hello\n"
		f := u.deployZip(t, "goport", modeZip(t, zfile{"bootstrap", []byte(script), 0o755}, zfile{"hello", bin, 0o755}))
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "health check") || !strings.Contains(f.Status.Message, "$PORT") {
			t.Errorf("status %+v", f.Status)
		}
	})
}
