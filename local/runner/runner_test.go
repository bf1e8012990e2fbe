package runner_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/runspec"
)

// A job's result is written by tenant code: reading it back must not follow a link the job put in
// its place, block on a FIFO, or read more than the contract's 4 KiB.
func TestReadResultTrustsNothing(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "host-secret")
	os.WriteFile(secret, []byte("root:x:0:0"), 0o600)

	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte(`{"sum": 600}`), 0o644)
	if got, err := runner.ReadResult(ok); err != nil || got != `{"sum": 600}` {
		t.Errorf("a regular result: %q %v", got, err)
	}
	if got, err := runner.ReadResult(filepath.Join(dir, "missing")); err != nil || got != "" {
		t.Errorf("no result: %q %v", got, err)
	}

	link := filepath.Join(dir, "link")
	os.Symlink(secret, link)
	if got, err := runner.ReadResult(link); !errors.Is(err, runner.ErrNotRegular) || strings.Contains(got, "root") {
		t.Errorf("a symlink to a host file: %q %v, want ErrNotRegular and nothing read", got, err)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := runner.ReadResult(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, runner.ErrNotRegular) {
			t.Errorf("a FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO result blocked")
	}

	huge := filepath.Join(dir, "huge")
	f, _ := os.Create(huge)
	f.Truncate(1 << 40) // a 1 TiB sparse file
	f.WriteAt([]byte("x"), 0)
	f.Close()
	if got, err := runner.ReadResult(huge); err != nil || len(got) != runspec.MaxResultBytes {
		t.Errorf("a 1 TiB result: %d bytes read (%v), want %d", len(got), err, runspec.MaxResultBytes)
	}

	os.Mkdir(filepath.Join(dir, "adir"), 0o755)
	if _, err := runner.ReadResult(filepath.Join(dir, "adir")); !errors.Is(err, runner.ErrNotRegular) {
		t.Errorf("a directory: %v", err)
	}
}
