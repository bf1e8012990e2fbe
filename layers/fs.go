package layers

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// FromFS builds a layer from every file under the root of fsys. Symlinks, hardlinks (a regular file
// with more than one link, when the FS reports it) and special files are rejected.
func FromFS(fsys fs.FS, opts ...Option) (*Layer, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, err
	}
	c := newCollector(o)
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %q: %w", p, err)
		}
		if p == "." {
			return nil
		}
		name, err := cleanName(p)
		if err != nil {
			return err
		}
		t := d.Type()
		if t&fs.ModeSymlink != 0 && o.symlinks {
			target, err := fs.ReadLink(fsys, p)
			if err != nil {
				return fmt.Errorf("reading link %q: %w", p, err)
			}
			resolved := path.Join(path.Dir(p), target)
			if path.IsAbs(target) || resolved == ".." || strings.HasPrefix(resolved, "../") {
				return entryErr(ErrUnsupportedType, p, "is a symlink to %q, outside the tree", target)
			}
			return c.add(entry{name: name, raw: p, link: target})
		}
		if t&fs.ModeSymlink != 0 || (!d.IsDir() && t != 0) {
			return entryErr(ErrUnsupportedType, p, "is a %s; only regular files and directories are allowed", typeName(t))
		}
		if d.IsDir() {
			return c.add(entry{name: name, raw: p + "/", dir: true})
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("reading %q: %w", p, err)
		}
		if !info.Mode().IsRegular() {
			return entryErr(ErrUnsupportedType, p, "is a %s; only regular files and directories are allowed", typeName(info.Mode().Type()))
		}
		if hardlinked(info) {
			return entryErr(ErrUnsupportedType, p, "is a hardlink (more than one link to the same file); copy the file instead")
		}
		return c.add(entry{
			name: name, raw: p, exec: info.Mode()&0o111 != 0, size: info.Size(),
			open: func() (io.ReadCloser, error) { return fsys.Open(p) },
		})
	})
	if err != nil {
		var ee *EntryError
		if errors.As(err, &ee) {
			return nil, err
		}
		return nil, fmt.Errorf("walking source: %w", err)
	}
	entries, err := c.complete()
	if err != nil {
		return nil, err
	}
	return write(o, entries, 0)
}
