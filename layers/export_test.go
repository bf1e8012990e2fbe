package layers

import "io"

// CountZipRecords exposes the directory walk to the external tests, which compare it with what
// archive/zip reads: how many central-directory records the archive holds, up to limit+1; ok is
// false when archive/zip would find no directory.
func CountZipRecords(r io.ReaderAt, size int64, limit int) (n int, ok bool) {
	d, ok := findZipDirectory(r, size)
	if !ok {
		return 0, false
	}
	return countDirectoryRecords(r, size, d, limit), true
}
