package runner

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// runRoot is the tmpfs every Linux host has: what is written there never reaches a disk.
const runRoot = "/dev/shm"

// RunDir is where the runner of instance keeps what its containers are handed in private (their
// env file, their secret files): a directory of its own on a tmpfs, outside the data dir, so that
// neither a copy nor a backup of the data dir holds a tenant's secret in clear.
func RunDir(instance string) string { return filepath.Join(runRoot, "sless-"+instance) }

// PrepareRunDir makes RunDir (mode 0700, root's) and checks that it is on a tmpfs.
func (r *Runner) PrepareRunDir() error {
	if err := os.MkdirAll(filepath.Join(r.runDir, "env"), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(r.runDir, 0o700); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(r.runDir, &st); err != nil {
		return err
	}
	if st.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s is not on a tmpfs (filesystem type %#x): secrets handed to containers would be written to disk", r.runDir, st.Type)
	}
	return nil
}

// RemoveRunDir removes RunDir once no container of the instance is left (sless down).
func RemoveRunDir(instance string) error { return os.RemoveAll(RunDir(instance)) }
