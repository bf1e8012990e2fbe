package layers_test

import (
	"io"
	"syscall"

	"github.com/klauspost/compress/flate"
)

func zipDeflater(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, flate.BestSpeed) }

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
