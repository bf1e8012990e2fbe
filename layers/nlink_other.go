//go:build !unix

package layers

import "io/fs"

func hardlinked(fs.FileInfo) bool { return false }
