package layers

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
)

// entry is one validated input entry, before it is written.
type entry struct {
	name string // clean relative path
	raw  string // the name as it appeared in the input, for messages
	dir  bool
	exec bool
	link string // symlink target (WithSymlinks only)
	size int64  // declared size of a regular file
	open func() (io.ReadCloser, error)
}

// collector validates entries as a source yields them: names, duplicates (also case-insensitive),
// file/directory clashes and the entry-count limit.
type collector struct {
	o        *options
	entries  []entry
	byName   map[string]int    // clean name -> index in entries
	byFold   map[string]string // lower-cased name -> clean name
	declared int64
}

func newCollector(o *options) *collector {
	return &collector{o: o, byName: map[string]int{}, byFold: map[string]string{}}
}

func (c *collector) add(e entry) error {
	if len(c.entries) >= c.o.maxEntries {
		return entryErr(ErrTooManyEntries, e.raw, "more than %d entries", c.o.maxEntries)
	}
	if i, ok := c.byName[e.name]; ok {
		if c.entries[i].dir && e.dir {
			return nil // a directory named twice is harmless (zip tools do this)
		}
		return entryErr(ErrDuplicate, e.raw, "the archive contains this name more than once")
	}
	fold := strings.ToLower(e.name)
	if other, ok := c.byFold[fold]; ok {
		return entryErr(ErrDuplicate, e.raw, "differs only in case from %q; such names collide on case-insensitive filesystems", other)
	}
	if !e.dir && e.link == "" {
		c.declared += e.size
		if c.declared > c.o.maxBytes {
			return entryErr(ErrTooLarge, e.raw, "uncompressed size exceeds the limit of %d bytes", c.o.maxBytes)
		}
	}
	c.byName[e.name] = len(c.entries)
	c.byFold[fold] = e.name
	c.entries = append(c.entries, e)
	return nil
}

// checkExecutable enforces WithExecutable on the collected entries (before implicit directories
// are added: a name only implied by a deeper path is a directory).
func (c *collector) checkExecutable() error {
	name := c.o.executable
	if name == "" {
		return nil
	}
	i, ok := c.byName[name]
	if !ok {
		for dir := range c.byName {
			if strings.HasPrefix(dir, name+"/") {
				return entryErr(ErrNotExecutable, name, "is a directory; it must be an executable file at the root of the archive")
			}
		}
		if other, ok := c.byFold[strings.ToLower(name)]; ok {
			return entryErr(ErrNotExecutable, name, "is missing from the root of the archive (there is %q: names are case-sensitive)", other)
		}
		return entryErr(ErrNotExecutable, name, "is missing from the root of the archive; put the executable %s there (not in a subdirectory)", name)
	}
	switch e := c.entries[i]; {
	case e.dir:
		return entryErr(ErrNotExecutable, name, "is a directory; it must be an executable file at the root of the archive")
	case e.link != "":
		return entryErr(ErrNotExecutable, name, "is a symlink; it must be a regular executable file")
	case !e.exec:
		return entryErr(ErrNotExecutable, name, "is not executable (no x bit in its mode); set it with `chmod +x %s` before zipping (zip keeps Unix modes; an archive made without them has none)", name)
	}
	return nil
}

// complete adds implicit parent directories and sorts. Lexical order puts every directory before
// its contents, since a parent's path is a prefix of its children's.
func (c *collector) complete() ([]entry, error) {
	if err := c.checkExecutable(); err != nil {
		return nil, err
	}
	n := len(c.entries)
	for i := 0; i < n; i++ {
		for dir := path.Dir(c.entries[i].name); dir != "."; dir = path.Dir(dir) {
			if j, ok := c.byName[dir]; ok {
				if !c.entries[j].dir {
					return nil, entryErr(ErrDuplicate, c.entries[j].raw, "is a file but %q needs it to be a directory", c.entries[i].raw)
				}
				break
			}
			if other, ok := c.byFold[strings.ToLower(dir)]; ok {
				return nil, entryErr(ErrDuplicate, c.entries[i].raw, "directory %q differs only in case from %q", dir, other)
			}
			// Implicit directories are entries too: they count against the limit.
			if len(c.entries) >= c.o.maxEntries {
				return nil, entryErr(ErrTooManyEntries, c.entries[i].raw, "more than %d entries, counting parent directories", c.o.maxEntries)
			}
			c.byName[dir] = len(c.entries)
			c.byFold[strings.ToLower(dir)] = dir
			c.entries = append(c.entries, entry{name: dir, raw: dir + "/", dir: true})
		}
	}
	sort.Slice(c.entries, func(i, j int) bool { return c.entries[i].name < c.entries[j].name })
	return c.entries, nil
}

// meter counts decompressed bytes as they are read and stops at the limits.
type meter struct {
	o        *options
	total    int64
	archive  int64 // size of the compressed input for the ratio limit; 0 disables it
	entryRaw string
}

func (m *meter) count(n int) error {
	m.total += int64(n)
	if m.total > m.o.maxBytes {
		return entryErr(ErrTooLarge, m.entryRaw, "uncompressed size exceeds the limit of %d bytes", m.o.maxBytes)
	}
	if m.archive > 0 && m.total > ratioFloor && m.total > m.archive*m.o.maxRatio {
		return entryErr(ErrCompressionRatio, m.entryRaw, "archive of %d bytes expands past %d bytes (more than %d:1)", m.archive, m.total, m.o.maxRatio)
	}
	return nil
}

type meteredReader struct {
	r io.Reader
	m *meter
}

func (mr meteredReader) Read(p []byte) (int, error) {
	n, err := mr.r.Read(p)
	if merr := mr.m.count(n); merr != nil {
		return n, merr
	}
	return n, err
}

// write streams entries into a tar, hashing it (diffID), gzipping it and hashing the result
// (digest) in one pass, into a spool.
func write(o *options, entries []entry, archiveSize int64) (_ *Layer, err error) {
	l := &Layer{mediaType: o.mediaType}
	sp := &spool{limit: o.spoolMemory, dir: o.tempDir}
	defer func() {
		if ferr := sp.finish(l, err != nil); err == nil && ferr != nil {
			err = fmt.Errorf("writing layer: %w", ferr)
		}
	}()

	digest, diffID := sha256.New(), sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(digest, sp), 64<<10)
	gw, err := gzip.NewWriterLevel(bw, o.level)
	if err != nil {
		return nil, err
	}
	uncompressed := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(diffID, gw, uncompressed))

	// The prefix's own directories come first, explicitly, like every other parent.
	prefix := strings.TrimPrefix(o.prefix, "/")
	parts := strings.Split(prefix, "/")
	for i := range parts {
		if err := tw.WriteHeader(o.header(strings.Join(parts[:i+1], "/")+"/", true, false, 0)); err != nil {
			return nil, err
		}
	}
	m := &meter{o: o, archive: archiveSize}
	var buf []byte
	for _, e := range entries {
		name := prefix + "/" + e.name
		if e.dir {
			if err := tw.WriteHeader(o.header(name+"/", true, false, 0)); err != nil {
				return nil, err
			}
			continue
		}
		if e.link != "" {
			h := o.header(name, false, false, 0)
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(o.header(name, false, e.exec, e.size)); err != nil {
			return nil, err
		}
		if buf == nil {
			buf = make([]byte, 32<<10)
		}
		if err := copyEntry(tw, e, m, buf); err != nil {
			return nil, err
		}
		l.files++
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	l.digest = hashOf(digest)
	l.diffID = hashOf(diffID)
	l.size = sp.n
	l.uncompressedSize = uncompressed.n
	return l, nil
}

// copyEntry copies exactly the declared size and insists the entry ends there: a header cannot be
// rewritten once streamed, and a size mismatch means the input lied or changed underneath us.
func copyEntry(w io.Writer, e entry, m *meter, buf []byte) error {
	rc, err := e.open()
	if err != nil {
		return entryErr(ErrInvalidArchive, e.raw, "cannot be read: %v", err)
	}
	defer rc.Close()
	m.entryRaw = e.raw
	r := meteredReader{r: rc, m: m}
	n, err := io.CopyBuffer(w, io.LimitReader(r, e.size), buf)
	if err != nil {
		return wrapReadErr(e, err)
	}
	if n != e.size {
		return entryErr(ErrInvalidArchive, e.raw, "declared %d bytes but holds %d", e.size, n)
	}
	// One more read must report EOF; it also lets archive/zip verify the CRC.
	var one [1]byte
	k, err := io.ReadFull(r, one[:])
	if k > 0 {
		return entryErr(ErrInvalidArchive, e.raw, "holds more bytes than the %d declared", e.size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return wrapReadErr(e, err)
	}
	return nil
}

func wrapReadErr(e entry, err error) error {
	var ee *EntryError
	if errors.As(err, &ee) {
		return err
	}
	return entryErr(ErrInvalidArchive, e.raw, "cannot be read: %v", err)
}

func (o *options) header(name string, dir, exec bool, size int64) *tar.Header {
	h := &tar.Header{Name: name, ModTime: o.modTime, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
	if dir {
		h.Typeflag, h.Mode = tar.TypeDir, 0o755
	} else if exec {
		h.Mode = 0o755
	}
	return h
}

func hashOf(h hash.Hash) v1.Hash {
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum[:])}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
