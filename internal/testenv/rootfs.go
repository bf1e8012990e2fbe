package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/sless-dev/sless/local/runtimeimages"
)

// Rootfs is the root filesystem of a runtime's base image (hack/build-bases.sh), unpacked on the
// host: tests run the base's own interpreter from it (a node binary runs on the host as it is;
// python3.13 needs trixie's libc, so it runs chrooted into Dir).
type Rootfs struct {
	// Dir is the unpacked root filesystem.
	Dir string
	// Env is the base image's configured environment (PATH, LANG, …).
	Env []string
}

var (
	rootfsMu   sync.Mutex
	rootfsDone = map[string]rootfsResult{}
)

type rootfsResult struct {
	fs  Rootfs
	err error
}

// BaseRootfs returns runtime's base unpacked under CacheDir()/rootfs, keyed by the layout's image
// digest: the first caller on the machine unpacks it (into a temporary directory renamed into place),
// later ones, in this test process or another, reuse it. A missing base is Missing (a skip, or a
// failure under SLESS_REQUIRE_REAL=1).
func BaseRootfs(t testing.TB, runtime string) Rootfs {
	t.Helper()
	bases := filepath.Join(CacheDir(), "bases")
	if _, err := os.Stat(filepath.Join(runtimeimages.BaseDir(bases, runtime), "index.json")); err != nil {
		Missing(t, "the "+runtime+" base image (hack/build-bases.sh "+runtime+")", err)
	}
	rootfsMu.Lock()
	defer rootfsMu.Unlock()
	r, ok := rootfsDone[runtime]
	if !ok {
		r.fs, r.err = unpackBase(bases, filepath.Join(CacheDir(), "rootfs"), runtime)
		rootfsDone[runtime] = r
	}
	if r.err != nil {
		t.Fatalf("unpacking the %s base: %v", runtime, r.err)
	}
	return r.fs
}

func unpackBase(basesDir, parent, runtime string) (Rootfs, error) {
	img, digest, err := runtimeimages.Base(basesDir, runtime)
	if err != nil {
		return Rootfs{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Rootfs{}, err
	}
	out := Rootfs{Dir: filepath.Join(parent, runtime+"-"+digest.Hex[:16]), Env: cf.Config.Env}
	if _, err := os.Stat(filepath.Join(out.Dir, "bin")); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Rootfs{}, err
	}
	tmp, err := os.MkdirTemp(parent, "tmp."+runtime+".")
	if err != nil {
		return Rootfs{}, err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Rootfs{}, err
	}
	// The flattened filesystem through tar (owners and modes kept as root; GNU tar refuses
	// members that would land outside tmp). The base is ours (hack/build-bases.sh), not a tenant's.
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "-C", tmp)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		return Rootfs{}, fmt.Errorf("tar -x: %v: %s", err, out)
	}
	if err := os.Rename(tmp, out.Dir); err != nil {
		// Another process renamed its copy first: use that one.
		if _, serr := os.Stat(filepath.Join(out.Dir, "bin")); serr == nil {
			return out, nil
		}
		return Rootfs{}, err
	}
	return out, nil
}
