package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"
)

// SweepStats says what a Sweep removed and kept.
type SweepStats struct {
	// Blobs and Bytes are the blobs removed (layers, configs and the manifests' own blobs) and
	// their size on disk.
	Blobs int
	Bytes int64
	// Kept is the number of blobs left.
	Kept int
	// Err is why a sweep at start failed (Config.SweepAtStart; the registry serves anyway).
	Err error
}

// blobsDir is where the filesystem driver keeps blob data below RootDir (Distribution's layout:
// blobs/sha256/<2 hex>/<hex>/data).
const blobsDir = "docker/registry/v2/blobs"

// Sweep removes the blobs under rootDir that no manifest in the registry references, with
// Distribution's mark-and-sweep. It keeps every manifest, tagged or not (a function may run an
// image by digest whose tag moved on), every blob any of them references, in any repository, and
// leaves unfinished uploads alone. A repository's link to a blob none of its own manifests
// references may go (Distribution drops links to blobs unmarked when it visits the repository);
// the blob stays while a manifest elsewhere references it, and a push that needs it there uploads
// or mounts it again. Manifests are deleted online, through the API; this reclaims what they held.
//
// No registry may serve rootDir meanwhile: a blob uploaded while the sweep runs is referenced by
// no manifest yet and would be deleted under the upload. Start runs it before listening
// (Config.SweepAtStart).
func Sweep(ctx context.Context, rootDir string) (SweepStats, error) {
	if rootDir == "" {
		return SweepStats{}, errors.New("registry: Sweep needs a RootDir")
	}
	before, err := blobSizes(rootDir)
	if err != nil {
		return SweepStats{}, err
	}
	if _, err := os.Stat(filepath.Join(rootDir, "docker/registry/v2/repositories")); errors.Is(err, fs.ErrNotExist) && len(before) == 0 {
		return SweepStats{}, nil // nothing stored yet (MarkAndSweep fails on a missing tree)
	}
	// MarkAndSweep logs each deletion at info level through logrus; Start keeps the registry's
	// logs at warnings, and so does this.
	logrus.SetLevel(logrus.WarnLevel)
	drv := filesystem.New(filesystem.DriverParameters{RootDirectory: rootDir, MaxThreads: 100})
	ns, err := storage.NewRegistry(ctx, drv, storage.EnableDelete)
	if err != nil {
		return SweepStats{}, fmt.Errorf("registry: sweep: %w", err)
	}
	// RemoveUntagged would also delete manifests no tag names: those of images still running by
	// digest. Quiet, or it prints every repository and blob to stdout.
	if err := storage.MarkAndSweep(ctx, drv, ns, storage.GCOpts{RemoveUntagged: false, Quiet: true}); err != nil {
		return SweepStats{}, fmt.Errorf("registry: sweep: %w", err)
	}
	// MarkAndSweep reports no sizes: compare the blob data files before and after.
	after, err := blobSizes(rootDir)
	if err != nil {
		return SweepStats{}, err
	}
	st := SweepStats{Kept: len(after)}
	for p, size := range before {
		if _, ok := after[p]; !ok {
			st.Blobs++
			st.Bytes += size
		}
	}
	return st, nil
}

// blobSizes maps each blob data file below rootDir to its size.
func blobSizes(rootDir string) (map[string]int64, error) {
	sizes := map[string]int64{}
	err := filepath.WalkDir(filepath.Join(rootDir, blobsDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && d.Name() == "data" {
			info, err := d.Info()
			if err != nil {
				return err
			}
			sizes[p] = info.Size()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("registry: reading blob sizes: %w", err)
	}
	return sizes, nil
}
