package layers

import (
	"bytes"
	"encoding/binary"
	"io"
)

// zipRecordCount reads how many central-directory records the archive's end-of-central-directory
// record (or its zip64 form) declares, without parsing the directory itself: archive/zip
// allocates for every record before any limit could apply, so a 50 MiB archive of a million empty
// records would cost hundreds of MiB. ok is false when no such record is found (the zip reader
// then says what is wrong).
func zipRecordCount(r io.ReaderAt, size int64) (n uint64, ok bool) {
	const eocdLen, maxComment = 22, 65535
	tail := min(size, eocdLen+maxComment)
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && err != io.EOF {
		return 0, false
	}
	i := bytes.LastIndex(buf, []byte("PK\x05\x06"))
	if i < 0 || len(buf)-i < eocdLen {
		return 0, false
	}
	eocd := buf[i:]
	n = uint64(binary.LittleEndian.Uint16(eocd[10:12]))
	if n != 0xFFFF {
		return n, true
	}
	// zip64: the locator sits right before the record and points at the zip64 record.
	loc := size - tail + int64(i) - 20
	if loc < 0 {
		return n, true
	}
	l := make([]byte, 20)
	if _, err := r.ReadAt(l, loc); err != nil || !bytes.Equal(l[:4], []byte("PK\x06\x07")) {
		return n, true
	}
	off := int64(binary.LittleEndian.Uint64(l[8:16]))
	rec := make([]byte, 56)
	if off < 0 || off+56 > size {
		return n, true
	}
	if _, err := r.ReadAt(rec, off); err != nil || !bytes.Equal(rec[:4], []byte("PK\x06\x06")) {
		return n, true
	}
	return binary.LittleEndian.Uint64(rec[32:40]), true
}
