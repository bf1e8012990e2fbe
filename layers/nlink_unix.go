//go:build unix

package layers

import (
	"io/fs"
	"syscall"
)

func hardlinked(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}
