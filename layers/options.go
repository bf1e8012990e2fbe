package layers

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// Default limits. They bound what one function's code may be; deps layers may raise them.
const (
	DefaultPrefix      = "/app/function"
	DefaultMaxEntries  = 50_000
	DefaultMaxBytes    = 512 << 20
	DefaultMaxRatio    = 200
	DefaultSpoolMemory = 4 << 20
	// ratioFloor: below this many decompressed bytes the ratio limit is not applied, so a tiny
	// archive of highly compressible text is not mistaken for a bomb; a bomb needs volume to hurt.
	ratioFloor = 1 << 20
)

// Option configures FromZip and FromFS.
type Option func(*options) error

type options struct {
	prefix      string
	modTime     time.Time
	maxEntries  int
	maxBytes    int64
	maxRatio    int64
	level       int
	mediaType   types.MediaType
	tempDir     string
	spoolMemory int64
	symlinks    bool
	executable  string
}

func makeOptions(opts ...Option) (*options, error) {
	o := &options{
		prefix:      DefaultPrefix,
		modTime:     time.Unix(0, 0).UTC(),
		maxEntries:  DefaultMaxEntries,
		maxBytes:    DefaultMaxBytes,
		maxRatio:    DefaultMaxRatio,
		level:       gzip.BestSpeed,
		mediaType:   types.OCILayer,
		spoolMemory: DefaultSpoolMemory,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.maxEntries <= 0 || o.maxBytes <= 0 || o.maxRatio <= 0 {
		return nil, errors.New("layers: limits must be positive")
	}
	return o, nil
}

// WithPrefix sets the absolute directory the entries are placed under.
// The default is "/app/function".
func WithPrefix(p string) Option {
	return func(o *options) error {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("layers: prefix %q must be a clean absolute path other than /", p)
		}
		o.prefix = p
		return nil
	}
}

// WithModTime sets the mtime of every entry (callers pass SOURCE_DATE_EPOCH here).
// The default is the Unix epoch.
func WithModTime(t time.Time) Option {
	return func(o *options) error {
		o.modTime = t.UTC().Truncate(time.Second)
		return nil
	}
}

// WithMaxEntries limits the number of files and directories read from the input.
// The default is 50,000.
func WithMaxEntries(n int) Option {
	return func(o *options) error { o.maxEntries = n; return nil }
}

// WithMaxBytes limits the total uncompressed size, counted on the bytes actually read.
// The default is 512 MiB.
func WithMaxBytes(n int64) Option {
	return func(o *options) error { o.maxBytes = n; return nil }
}

// WithMaxRatio limits uncompressed bytes read per byte of zip archive (FromZip only); it applies once
// more than 1 MiB has been decompressed. The default is 200.
func WithMaxRatio(n int64) Option {
	return func(o *options) error { o.maxRatio = n; return nil }
}

// WithCompressionLevel sets the gzip level of the layer.
// The default is gzip.BestSpeed (1): code layers are small and build latency matters more.
func WithCompressionLevel(level int) Option {
	return func(o *options) error {
		if level < gzip.HuffmanOnly || level > gzip.BestCompression {
			return fmt.Errorf("layers: invalid gzip level %d", level)
		}
		o.level = level
		return nil
	}
}

// WithMediaType sets the layer's media type, so it matches the manifest it is appended to
// (types.DockerLayer for Docker schema 2 images). The default is types.OCILayer.
func WithMediaType(mt types.MediaType) Option {
	return func(o *options) error { o.mediaType = mt; return nil }
}

// WithTempDir sets where compressed layers larger than the spool threshold are kept.
// The default is os.TempDir().
func WithTempDir(dir string) Option {
	return func(o *options) error { o.tempDir = dir; return nil }
}

// WithSpoolMemory sets how many compressed bytes are kept in memory before the layer spills to a
// temporary file. The default is 4 MiB.
func WithSpoolMemory(n int64) Option {
	return func(o *options) error { o.spoolMemory = n; return nil }
}

// WithSymlinks lets FromFS keep relative symlinks whose target stays inside the tree (npm's
// node_modules/.bin links); links that point outside or are absolute are still rejected. Zips never
// carry links. The default is to reject every symlink.
func WithSymlinks() Option {
	return func(o *options) error { o.symlinks = true; return nil }
}

// WithExecutable requires a regular file called name at the root of the input with an execute bit
// (a zip entry's Unix mode, a file's mode): a provided function's bootstrap. Missing, a directory,
// or without any x bit is ErrNotExecutable (symlinks are refused as always). The default requires
// nothing.
func WithExecutable(name string) Option {
	return func(o *options) error {
		if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
			return fmt.Errorf("layers: executable %q must be a plain file name", name)
		}
		o.executable = name
		return nil
	}
}
