package codestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Dir stores each key as a file under a root directory.
type Dir struct{ root string }

var _ Store = (*Dir)(nil)

// NewDir uses (and creates) root.
func NewDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("code store directory: %w", err)
	}
	return &Dir{root: root}, nil
}

// file maps a key to a path, refusing keys that could leave the root.
func (d *Dir) file(key string) (string, error) {
	clean := path.Clean(strings.TrimSuffix(key, "/"))
	if key == "" || path.IsAbs(key) || clean == "." || strings.HasPrefix(clean, "../") || clean == ".." || strings.ContainsRune(key, 0) || strings.Contains(key, `\`) {
		return "", fmt.Errorf("code store key %q is not a clean relative path", key)
	}
	return filepath.Join(d.root, filepath.FromSlash(clean)), nil
}

// Put writes the object atomically: a temporary file renamed into place, so a reader never sees
// half an archive and a failed write leaves nothing.
func (d *Dir) Put(_ context.Context, key string, r io.Reader, size int64) error {
	p, err := d.file(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	n, err := io.Copy(tmp, r)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("wrote %d bytes, expected %d", n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("storing %s: %w", key, err)
	}
	return nil
}

// Get opens the object.
func (d *Dir) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.file(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return f, err
}

// Exists reports whether the object is there.
func (d *Dir) Exists(_ context.Context, key string) (bool, error) {
	p, err := d.file(key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// DeletePrefix removes every object under a directory-like prefix ("code/ns/name/").
func (d *Dir) DeletePrefix(_ context.Context, prefix string) error {
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("prefix %q must end with /", prefix)
	}
	p, err := d.file(prefix)
	if err != nil {
		return err
	}
	// A writer may add a file while the tree is removed (a function's events are written behind
	// its lifecycle, and its deletion races the last of them): RemoveAll then finds a directory
	// it emptied not empty. What came in meanwhile goes with the next pass.
	for range 10 {
		if err = os.RemoveAll(p); !errors.Is(err, syscall.ENOTEMPTY) {
			return err
		}
	}
	return err
}

// List returns the objects under a directory-like prefix, in key order.
func (d *Dir) List(_ context.Context, prefix string) ([]Object, error) {
	if !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("prefix %q must end with /", prefix)
	}
	root, err := d.file(prefix)
	if err != nil {
		return nil, err
	}
	var out []Object
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return fs.SkipAll
		}
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			return err // dot files are Put's temporaries
		}
		info, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, Object{Key: prefix + filepath.ToSlash(rel), Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	return out, err
}

// Delete removes the object's file.
func (d *Dir) Delete(_ context.Context, key string) error {
	p, err := d.file(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
