package layers

import (
	"path"
	"regexp"
	"strings"
	"unicode/utf8"
)

var driveLetter = regexp.MustCompile(`^[A-Za-z]:`)

// Bounds on one name: deep or long paths cost memory and time per parent directory.
const (
	maxNameBytes = 4096
	maxNameDepth = 128
)

// cleanName turns an entry name from the input into a clean relative slash path, or explains why
// it is unsafe. A trailing "/" (a zip directory marker) and leading "./" are accepted and dropped;
// "" comes back for the root directory itself.
func cleanName(raw string) (string, error) {
	switch {
	case len(raw) > maxNameBytes:
		return "", entryErr(ErrUnsafePath, raw[:64]+"…", "name is longer than %d bytes", maxNameBytes)
	case strings.Count(raw, "/") > maxNameDepth:
		return "", entryErr(ErrUnsafePath, raw[:64]+"…", "name is nested deeper than %d directories", maxNameDepth)
	case strings.IndexByte(raw, 0) >= 0:
		return "", entryErr(ErrUnsafePath, raw, "name contains a NUL byte")
	case !utf8.ValidString(raw):
		return "", entryErr(ErrUnsafePath, raw, "name is not valid UTF-8")
	case strings.Contains(raw, `\`):
		return "", entryErr(ErrUnsafePath, raw, `name contains a backslash; archives must use "/" as the separator`)
	case strings.HasPrefix(raw, "/") || driveLetter.MatchString(raw):
		return "", entryErr(ErrUnsafePath, raw, "absolute paths are not allowed; paths must be relative to the function root")
	}
	name := strings.TrimSuffix(raw, "/")
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	if name == "." || name == "" {
		return "", nil
	}
	for _, elem := range strings.Split(name, "/") {
		switch {
		case elem == "..":
			return "", entryErr(ErrUnsafePath, raw, `".." would escape the function root`)
		case elem == "" || elem == ".":
			return "", entryErr(ErrUnsafePath, raw, "name is not a clean path (empty or \".\" element)")
		case strings.HasPrefix(elem, ".wh."):
			return "", entryErr(ErrUnsafePath, raw, `names starting with ".wh." are OCI whiteouts and would delete files from the image`)
		}
	}
	if path.Clean(name) != name {
		return "", entryErr(ErrUnsafePath, raw, "name is not a clean path")
	}
	return name, nil
}
