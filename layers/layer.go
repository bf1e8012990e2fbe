package layers

import (
	"bytes"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// Layer is a finished, deterministic layer. Its compressed bytes live in memory or, past the spool
// threshold, in a temporary file that Close removes.
type Layer struct {
	digest, diffID   v1.Hash
	size             int64
	uncompressedSize int64
	mediaType        types.MediaType
	files            int
	mem              []byte
	file             string
}

var _ v1.Layer = (*Layer)(nil)

// Digest is the sha256 of the compressed layer.
func (l *Layer) Digest() (v1.Hash, error) { return l.digest, nil }

// DiffID is the sha256 of the uncompressed tar.
func (l *Layer) DiffID() (v1.Hash, error) { return l.diffID, nil }

// Size is the compressed size in bytes.
func (l *Layer) Size() (int64, error) { return l.size, nil }

// MediaType is the media type chosen with WithMediaType.
func (l *Layer) MediaType() (types.MediaType, error) { return l.mediaType, nil }

// UncompressedSize is the size of the tar stream.
func (l *Layer) UncompressedSize() int64 { return l.uncompressedSize }

// Files is the number of regular files in the layer.
func (l *Layer) Files() int { return l.files }

// Compressed returns the gzip stream.
func (l *Layer) Compressed() (io.ReadCloser, error) {
	if l.file == "" {
		return io.NopCloser(bytes.NewReader(l.mem)), nil
	}
	return os.Open(l.file)
}

// Uncompressed returns the tar stream.
func (l *Layer) Uncompressed() (io.ReadCloser, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(rc)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &readCloser{Reader: zr, close: func() error { zr.Close(); return rc.Close() }}, nil
}

// Close removes the temporary file, if any. The layer must not be read afterwards.
func (l *Layer) Close() error {
	l.mem = nil
	if l.file == "" {
		return nil
	}
	err := os.Remove(l.file)
	l.file = ""
	return err
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r *readCloser) Close() error { return r.close() }

// spool keeps written bytes in memory up to limit, then moves them to a temporary file.
type spool struct {
	limit int64
	dir   string
	buf   bytes.Buffer
	f     *os.File
	n     int64
}

func (s *spool) Write(p []byte) (int, error) {
	if s.f == nil && int64(s.buf.Len()+len(p)) > s.limit {
		f, err := os.CreateTemp(s.dir, "sless-layer-*.tar.gz")
		if err != nil {
			return 0, err
		}
		s.f = f
		if _, err := f.Write(s.buf.Bytes()); err != nil {
			return 0, err
		}
		s.buf = bytes.Buffer{}
	}
	s.n += int64(len(p))
	if s.f != nil {
		return s.f.Write(p)
	}
	return s.buf.Write(p)
}

// finish hands the bytes to l; on error it removes the temporary file.
func (s *spool) finish(l *Layer, failed bool) error {
	if s.f == nil {
		if !failed {
			l.mem = s.buf.Bytes()
		}
		return nil
	}
	name := s.f.Name()
	err := s.f.Close()
	if failed || err != nil {
		os.Remove(name)
		return err
	}
	l.file = name
	return nil
}
