package layers

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped in *EntryError where an entry is to blame) by FromZip and FromFS.
// Callers test them with errors.Is; the API maps ErrTooLarge to 413 and the others to 400.
var (
	// ErrInvalidArchive: the input is not a readable zip (not a zip, truncated, checksum or size mismatch).
	ErrInvalidArchive = errors.New("invalid archive")
	// ErrUnsafePath: an absolute path, a ".." element, a backslash, a NUL byte, invalid UTF-8, a ".wh."
	// (whiteout) name or an empty name.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrUnsupportedType: a symlink, hardlink, device, FIFO or socket.
	ErrUnsupportedType = errors.New("unsupported file type")
	// ErrDuplicate: two entries with the same name, or names that differ only in case.
	ErrDuplicate = errors.New("duplicate entry")
	// ErrTooManyEntries: more entries than the limit (WithMaxEntries).
	ErrTooManyEntries = errors.New("too many entries")
	// ErrTooLarge: more uncompressed bytes than the limit (WithMaxBytes).
	ErrTooLarge = errors.New("too large")
	// ErrCompressionRatio: the archive expands more than the limit allows (WithMaxRatio): a zip bomb.
	ErrCompressionRatio = errors.New("compression ratio too high")
	// ErrNotExecutable: the executable WithExecutable requires is missing from the root, is a
	// directory, or has no execute bit.
	ErrNotExecutable = errors.New("no executable")
)

// EntryError names the entry that broke a rule.
type EntryError struct {
	Path   string // the name as it appeared in the input (quoted when printed)
	Reason string // what exactly is wrong, for the user
	Err    error  // one of the sentinel errors above
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("%v: %q: %s", e.Err, e.Path, e.Reason)
}

func (e *EntryError) Unwrap() error { return e.Err }

func entryErr(sentinel error, path, format string, args ...any) error {
	return &EntryError{Path: path, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}
