package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sless-dev/sless/local/podman"
)

// PodmanRunFlags are what `podman run` needs on these machines (DESIGN.md §7).
var PodmanRunFlags = podman.RunFlags

// Podman runs podman with the project's containers.conf (cgroupfs, runc) and its own storage under
// the cache dir, so tests neither touch nor depend on the machine's default container storage.
type Podman struct {
	bin  string
	args []string
	env  []string
}

// NewPodman finds podman or reports it missing (skip, or fail under SLESS_REQUIRE_REAL=1).
func NewPodman(t testing.TB) *Podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		Missing(t, "podman", err)
	}
	return &Podman{
		bin:  bin,
		args: podman.GlobalFlags(filepath.Join(CacheDir(), "podman")),
		env:  append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(moduleRoot(), "local", "podman", "containers.conf")),
	}
}

// Command returns a podman command with the project's global flags.
func (p *Podman) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.bin, append(append([]string{}, p.args...), args...)...)
	cmd.Env = p.env
	return cmd
}

// moduleRoot is the repository root, found from this source file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
