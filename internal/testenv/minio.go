package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
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
	port := FreePort(t)
	console := FreePort(t)
	s := S3Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: "sless-test", SecretKey: "sless-test-secret-key"}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "server", "--quiet", "--address", fmt.Sprintf("127.0.0.1:%d", port),
		"--console-address", fmt.Sprintf("127.0.0.1:%d", console), filepath.Join(t.TempDir(), "data"))
	cmd.Env = []string{"MINIO_ROOT_USER=" + s.AccessKey, "MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CALLHOME_ENABLE=off", "HOME=" + t.TempDir()}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting minio: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		select {
		case <-done:
			t.Fatalf("minio exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("minio not ready within 60 s: %s", out.String())
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
