package deps

import (
	"archive/zip"
	"fmt"
	"io"
	"strings"
)

// maxManifest bounds one manifest file read from an upload.
const maxManifest = 4 << 20

// ManifestsInZip reads runtime's dependency manifests at the root of an uploaded zip (nil if it
// has none), so every backend decides "does this function need a deps layer" the same way.
func ManifestsInZip(f io.ReaderAt, size int64, runtime string) (map[string][]byte, error) {
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, zf := range zr.File {
		n := strings.TrimPrefix(zf.Name, "./")
		if n != Requirements && n != PackageJSON && n != PackageLock {
			continue
		}
		if zf.UncompressedSize64 > maxManifest {
			return nil, fmt.Errorf("%w: %s is larger than 4 MiB", ErrInvalidSpec, n)
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, maxManifest))
		rc.Close()
		if err != nil {
			return nil, err
		}
		files[n] = b
	}
	return Detect(runtime, files), nil
}
