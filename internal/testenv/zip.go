package testenv

import (
	"archive/zip"
	"bytes"
	"sort"
)

// Zip returns a zip archive of files (name → content), entries in name order so equal inputs
// give equal bytes (and equal code_sha256).
func Zip(files map[string]string) []byte {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			panic(err) // only on a name longer than 64 KiB: a bug in the test
		}
		w.Write([]byte(files[n]))
	}
	zw.Close()
	return buf.Bytes()
}
