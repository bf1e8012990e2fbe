package client

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// zipEpoch is the earliest time a zip header can hold; every entry gets it, so the archive's bytes
// (and its sha256, the function's code_sha256) depend only on file names, modes and contents.
var zipEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// ZipDir zips a function's directory deterministically in memory for Upload, and returns the
// archive's sha256: sorted paths, fixed times, only the execute bit kept from the mode, .git and
// .terraform left out. The same directory gives the same archive (the Terraform provider's
// source_dir and `sless fn deploy` agree on code_sha256). Symlinks and special files are refused
// (the platform would refuse them too).
func ZipDir(dir string) ([]byte, string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && (d.Name() == ".terraform" || d.Name() == ".git") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (symlinks and special files cannot be deployed)", p)
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("%s holds no files", dir)
	}
	sort.Strings(files)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Stat(p)
		if err != nil {
			return nil, "", err
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		h := &zip.FileHeader{Name: filepath.ToSlash(rel), Method: zip.Deflate, Modified: zipEpoch}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, "", err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, "", err
		}
		if _, err := w.Write(b); err != nil {
			return nil, "", err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}
