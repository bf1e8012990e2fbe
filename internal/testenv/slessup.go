package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/regauth"
	"github.com/sless-dev/sless/local/runtimeimages"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// SlessBinary builds cmd/sless once per test process.
func SlessBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sless-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "sless")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/sless")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building sless: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// SlessUp is a real `sless up` process for a test.
type SlessUp struct {
	t       testing.TB
	cmd     *exec.Cmd
	DataDir string
	Listen  string
	RegAddr string
	// MetricsAddr is where /metrics is served (--metrics-listen), apart from Listen.
	MetricsAddr string
	// RegAuth is the platform's registry credential (the registry serves nothing anonymously).
	RegAuth authn.Authenticator
	URL     string
	Token   string
	Client  *client.Client
	done    chan struct{}
	log     *LockedBuffer
}

// FreeAddr is a free 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// StartSlessUp runs `sless up` on dataDir (with --test-clock) until the test ends or Stop, waits
// for /readyz and ensures the dev user's namespace. It needs podman and the base images. Empty
// addresses pick free ports, retrying if another process takes one first (a restart passes the
// previous run's addresses to keep them). /metrics goes to a free port too, unless extra names
// --metrics-listen.
func StartSlessUp(t testing.TB, dataDir, listen, regAddr string, extra ...string) *SlessUp {
	t.Helper()
	pick := listen == "" && regAddr == ""
	pickMetrics := !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--metrics-listen") })
	for attempt := 0; ; attempt++ {
		if pick {
			listen, regAddr = FreeAddr(t), FreeAddr(t)
		}
		args := extra
		if pickMetrics {
			args = append([]string{"--metrics-listen", FreeAddr(t)}, extra...)
		}
		u, inUse := startSlessUp(t, dataDir, listen, regAddr, args)
		if u != nil {
			return u
		}
		if !(pick || pickMetrics) || !inUse || attempt == 4 {
			t.Fatalf("sless up did not start")
		}
	}
}

func startSlessUp(t testing.TB, dataDir, listen, regAddr string, extra []string) (*SlessUp, bool) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		Missing(t, "podman", err)
	}
	bases := filepath.Join(CacheDir(), "bases")
	// sless up installs every runtime's image at start.
	if missing := runtimeimages.Missing(bases); len(missing) > 0 {
		Missing(t, "the base images of "+strings.Join(missing, ", ")+" (hack/build-bases.sh all)", runtimeimages.ErrBaseMissing)
	}
	u := &SlessUp{t: t, DataDir: dataDir, Listen: listen, RegAddr: regAddr, URL: "http://" + listen, done: make(chan struct{}), log: &LockedBuffer{},
		MetricsAddr: flagValue(extra, "--metrics-listen")}
	args := append([]string{"up", "--data-dir", dataDir, "--listen", listen, "--registry-listen", regAddr, "--test-clock",
		"--bases-script", "", "--podman-root", filepath.Join(CacheDir(), "podman"), "--bases-dir", bases}, extra...)
	u.cmd = exec.Command(SlessBinary(t), args...)
	u.cmd.Stdout = io.Discard
	u.cmd.Stderr = u.log
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.cmd.Wait(); close(u.done) }()
	deadline := time.Now().Add(120 * time.Second)
	for {
		if resp, err := http.Get(u.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-u.done:
			if strings.Contains(u.LogTail(), "address already in use") {
				return nil, true
			}
			t.Fatalf("sless up exited:\n%s", u.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sless up not ready within 120 s:\n%s", u.LogTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	u.Token = strings.TrimSpace(string(tok))
	keys, err := regauth.Load(filepath.Join(dataDir, "registry-auth"))
	if err != nil {
		t.Fatal(err)
	}
	u.RegAuth = keys.Platform().Authenticator()
	if u.Client, err = client.New(u.URL, u.Token); err != nil {
		t.Fatal(err)
	}
	if err := u.Client.EnsureNamespace(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Function containers outlive sless up by design; a test's must not outlive the test.
	// (Cleanups run last-in first-out: this one runs after Stop.)
	t.Cleanup(func() { removeInstanceContainers(t, dataDir) })
	t.Cleanup(u.Stop)
	return u, false
}

// removeInstanceContainers removes what sless up left on the host for dataDir: its containers,
// networks and firewall chain (`sless down`).
func removeInstanceContainers(t testing.TB, dataDir string) {
	cmd := exec.Command(SlessBinary(t), "down", "--data-dir", dataDir, "--podman-root", filepath.Join(CacheDir(), "podman"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sless down: %v\n%s", err, out)
	}
}

// LogTail is the end of the process's log.
func (u *SlessUp) LogTail() string {
	s := u.log.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// Log is the process's whole log (its stderr: the request log among it).
func (u *SlessUp) Log() string { return u.log.String() }

// LogWithout is the process's log without the lines that contain skip (e.g. the request log).
func (u *SlessUp) LogWithout(skip string) string {
	var out []string
	for _, l := range strings.Split(u.log.String(), "\n") {
		if !strings.Contains(l, skip) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Stop sends SIGTERM and waits (function containers keep running, as in production).
func (u *SlessUp) Stop() {
	select {
	case <-u.done:
		return
	default:
	}
	u.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-u.done:
	case <-time.After(30 * time.Second):
		u.cmd.Process.Kill()
		u.t.Error("sless up did not stop within 30 s of SIGTERM")
	}
}

// Get fetches a path of the API (or /fn/) and returns status and body.
func (u *SlessUp) Get(path string) (int, string) {
	resp, err := http.Get(u.URL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metrics fetches /metrics from the metrics listener, sending token as a bearer token when it is
// not empty, and returns status and body.
func (u *SlessUp) Metrics(token string) (int, string) {
	req, _ := http.NewRequest("GET", "http://"+u.MetricsAddr+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// flagValue is the value of flag name in args (--name value or --name=value), "" if absent.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// RegOpts are remote options with the platform's registry credential.
func (u *SlessUp) RegOpts() []remote.Option { return []remote.Option{remote.WithAuth(u.RegAuth)} }
