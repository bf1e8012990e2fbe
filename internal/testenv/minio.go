package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/ports"
)

// S3Server is a running MinIO: a real S3 server on 127.0.0.1.
type S3Server struct {
	Endpoint             string // "http://127.0.0.1:PORT"
	AccessKey, SecretKey string
}

// MinIO starts the MinIO binary built by hack/install-go-tools.sh on a free port for the test's
// lifetime, with its data in a temp dir.
func MinIO(t testing.TB) S3Server {
	t.Helper()
	return MinIOProcess(t).S3Server
}

// MinIOProcess is MinIO as a handle a test can stop and start again (an S3 outage): the same
// port, the same data. It is stopped when the test ends.
func MinIOProcess(t testing.TB) *MinIOServer {
	t.Helper()
	bin, err := Tool("minio")
	if err != nil {
		Missing(t, "minio (a real S3 server)", err)
	}
	m, err := NewMinIO(bin, "127.0.0.1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// StartMinIO runs MinIO on host (a free port there) with its data and home under dir, until stop.
// For callers without a testing.TB (a TestMain) and hosts other than loopback (a cluster's bridge).
func StartMinIO(bin, host, dir string) (S3Server, func(), error) {
	m, err := NewMinIO(bin, host, dir)
	if err != nil {
		return S3Server{}, nil, err
	}
	return m.S3Server, m.Stop, nil
}

// MinIOServer is a MinIO process that can be stopped and started again on the same address with
// the same data (the bucket and its objects survive). Its methods are safe for concurrent use.
type MinIOServer struct {
	S3Server
	bin, host, dir string
	port, console  int

	mu   sync.Mutex
	stop func()    // nil while stopped
	cmd  *exec.Cmd // the running process
}

// NewMinIO is StartMinIO as a handle: MinIO on host (free ports there), data and home under dir,
// running when it returns.
func NewMinIO(bin, host, dir string) (*MinIOServer, error) {
	port, err := ports.FreeOn(host)
	if err != nil {
		return nil, err
	}
	console, err := ports.FreeOn(host)
	if err != nil {
		return nil, err
	}
	m := &MinIOServer{S3Server: S3Server{Endpoint: fmt.Sprintf("http://%s", net.JoinHostPort(host, fmt.Sprint(port))),
		AccessKey: "sless-test", SecretKey: "sless-test-secret-key"}, bin: bin, host: host, dir: dir, port: port, console: console}
	if err := m.Start(); err != nil {
		return nil, err
	}
	return m, nil
}

// Stop ends the process (SIGKILL: an outage, not a shutdown) and waits for it; the data stays.
// Stopping a stopped server does nothing.
func (m *MinIOServer) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		m.stop()
		m.cmd, m.stop = nil, nil
	}
}

// Start runs MinIO again on its address and waits until it is ready (at most 60 s). Starting a
// running server does nothing. The port was free when the server first started; if another
// process took it while stopped, Start fails.
func (m *MinIOServer) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != nil {
		return nil
	}
	cmd, stop, err := m.run()
	if err != nil {
		return err
	}
	m.cmd, m.stop = cmd, stop
	return nil
}

// Running reports whether the process runs (it may not be ready yet only inside Start).
func (m *MinIOServer) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stop != nil
}

func (m *MinIOServer) run() (*exec.Cmd, func(), error) {
	addr := net.JoinHostPort(m.host, fmt.Sprint(m.port))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, m.bin, "server", "--quiet", "--address", addr,
		"--console-address", net.JoinHostPort(m.host, fmt.Sprint(m.console)), filepath.Join(m.dir, "data"))
	cmd.Env = []string{"MINIO_ROOT_USER=" + m.AccessKey, "MINIO_ROOT_PASSWORD=" + m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off", "HOME=" + filepath.Join(m.dir, "home")}
	out := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A test process that is killed takes its MinIO with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("starting minio: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() { cancel(); <-done }
	// Not http.DefaultClient: its idle connections to the old process would outlive a restart.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Not /minio/health/ready: it answers 200 before the object layer is up, and a request in
		// that window gets 503 "Server not initialized" (a restarted server failed a test that way).
		// The cluster check answers 200 only once the drives take writes.
		resp, err := hc.Get(m.Endpoint + "/minio/health/cluster")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return cmd, stop, nil
			}
		}
		select {
		case <-done:
			stop()
			return nil, nil, fmt.Errorf("minio exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, errors.New("minio not ready within 60 s: " + out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func FreePort(t testing.TB) int {
	p, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Pause stops the process with SIGSTOP: its port still accepts connections, nothing answers (a
// hung server, or a network that drops packets). Resume undoes it.
func (m *MinIOServer) Pause() error { return m.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (m *MinIOServer) Resume() error { return m.signal(syscall.SIGCONT) }

func (m *MinIOServer) signal(s syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return errors.New("minio is not running")
	}
	if err := m.cmd.Process.Signal(s); err != nil || s != syscall.SIGSTOP {
		return err
	}
	// kill(2) only queues SIGSTOP: a thread already serving a request may answer it before it
	// stops. Paused means every thread is stopped.
	pid := m.cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(pid) {
			return nil
		}
	}
	return fmt.Errorf("minio (pid %d) did not stop within 5 s of SIGSTOP", pid)
}

// allStopped reports whether every thread of process pid is stopped ("T" in /proc/…/stat).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		// "pid (comm) S …": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
