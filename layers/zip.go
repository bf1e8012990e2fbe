package layers

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// FromZip builds a layer from the zip archive in r (size bytes long). Nothing is written anywhere
// until every entry's name and type has passed; sizes are then enforced while decompressing.
func FromZip(r io.ReaderAt, size int64, opts ...Option) (*Layer, error) {
	o, entries, err := zipEntries(r, size, opts)
	if err != nil {
		return nil, err
	}
	return write(o, entries, size)
}

// ValidateZip applies every rule of FromZip, decompressing each entry to check sizes and
// checksums, without making a layer: the API checks uploads with it before storing them.
func ValidateZip(r io.ReaderAt, size int64, opts ...Option) error {
	o, entries, err := zipEntries(r, size, opts)
	if err != nil {
		return err
	}
	m := &meter{o: o, archive: size}
	buf := make([]byte, 32<<10)
	for _, e := range entries {
		if e.dir {
			continue
		}
		if err := copyEntry(io.Discard, e, m, buf); err != nil {
			return err
		}
	}
	return nil
}

// zipEntries reads and checks the central directory: names, types, duplicates, declared sizes.
func zipEntries(r io.ReaderAt, size int64, opts []Option) (*options, []entry, error) {
	o, err := makeOptions(opts...)
	if err != nil {
		return nil, nil, err
	}
	if size == 0 {
		return nil, nil, fmt.Errorf("%w: the archive is empty (0 bytes); upload a zip of the function's files", ErrInvalidArchive)
	}
	// Counted before archive/zip parses the directory, since it allocates for every record it reads.
	if d, ok := findZipDirectory(r, size); ok {
		if d.declared > uint64(o.maxEntries) {
			return nil, nil, fmt.Errorf("%w: the archive's directory declares %d entries, more than %d", ErrTooManyEntries, d.declared, o.maxEntries)
		}
		if n := countDirectoryRecords(r, size, d, o.maxEntries); n > o.maxEntries {
			return nil, nil, fmt.Errorf("%w: the archive's directory holds more than %d entries (its end record declares %d)", ErrTooManyEntries, o.maxEntries, d.declared)
		}
	}
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // insecure names are judged below, with reasons
		return nil, nil, fmt.Errorf("%w: not a readable zip archive: %v", ErrInvalidArchive, err)
	}
	c := newCollector(o)
	for _, f := range zr.File {
		name, err := cleanName(f.Name)
		if err != nil {
			return nil, nil, err
		}
		mode := f.Mode()
		isDir := mode.IsDir() || (len(f.Name) > 0 && f.Name[len(f.Name)-1] == '/')
		if t := mode.Type(); !isDir && t != 0 {
			return nil, nil, entryErr(ErrUnsupportedType, f.Name, "is a %s; only regular files and directories are allowed", typeName(t))
		}
		if name == "" {
			if !isDir {
				return nil, nil, entryErr(ErrUnsafePath, f.Name, "a file cannot be the function root")
			}
			continue
		}
		if f.UncompressedSize64 > uint64(o.maxBytes) {
			return nil, nil, entryErr(ErrTooLarge, f.Name, "declares %d bytes, over the limit of %d", f.UncompressedSize64, o.maxBytes)
		}
		f := f
		if err := c.add(entry{
			name: name, raw: f.Name, dir: isDir, exec: mode&0o111 != 0,
			size: int64(f.UncompressedSize64), open: func() (io.ReadCloser, error) { return f.Open() },
		}); err != nil {
			return nil, nil, err
		}
	}
	if len(c.entries) == 0 {
		return nil, nil, fmt.Errorf("%w: the archive holds no files", ErrInvalidArchive)
	}
	if c.declared > ratioFloor && c.declared > size*o.maxRatio {
		return nil, nil, fmt.Errorf("%w: archive of %d bytes declares %d uncompressed bytes (more than %d:1)", ErrCompressionRatio, size, c.declared, o.maxRatio)
	}
	entries, err := c.complete()
	if err != nil {
		return nil, nil, err
	}
	return o, entries, nil
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t&fs.ModeDevice != 0:
		return "device file"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	default:
		return "special file"
	}
}
