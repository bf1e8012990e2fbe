package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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
	bin, err := Tool("minio")
	if err != nil {
		Missing(t, "minio (a real S3 server)", err)
	}
	s, stop, err := StartMinIO(bin, "127.0.0.1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s
}

// StartMinIO runs MinIO on host (a free port there) with its data and home under dir, until stop.
// For callers without a testing.TB (a TestMain) and hosts other than loopback (a cluster's bridge).
func StartMinIO(bin, host, dir string) (S3Server, func(), error) {
	port, err := ports.FreeOn(host)
	if err != nil {
		return S3Server{}, nil, err
	}
	console, err := ports.FreeOn(host)
	if err != nil {
		return S3Server{}, nil, err
	}
	s := S3Server{Endpoint: fmt.Sprintf("http://%s", net.JoinHostPort(host, fmt.Sprint(port))), AccessKey: "sless-test", SecretKey: "sless-test-secret-key"}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "server", "--quiet", "--address", net.JoinHostPort(host, fmt.Sprint(port)),
		"--console-address", net.JoinHostPort(host, fmt.Sprint(console)), filepath.Join(dir, "data"))
	cmd.Env = []string{"MINIO_ROOT_USER=" + s.AccessKey, "MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off", "HOME=" + filepath.Join(dir, "home")}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A test process that is killed takes its MinIO with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		return S3Server{}, nil, fmt.Errorf("starting minio: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() { cancel(); <-done }
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, stop, nil
			}
		}
		select {
		case <-done:
			stop()
			return S3Server{}, nil, fmt.Errorf("minio exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return S3Server{}, nil, fmt.Errorf("minio not ready within 60 s: %s", out.String())
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
