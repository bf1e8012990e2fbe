package layers

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
)

// Record layouts of the zip format (APPNOTE.TXT 4.3), as far as archive/zip reads them.
const (
	eocdLen         = 22 // end of central directory record, without its comment
	eocd64LocLen    = 20 // zip64 end of central directory locator
	eocd64Len       = 56 // zip64 end of central directory record, without extensible data
	dirHeaderLen    = 46 // central directory header, without name, extra field and comment
	eocdSig         = 0x06054b50
	eocd64LocSig    = 0x07064b50
	eocd64Sig       = 0x06064b50
	dirHeaderSig    = 0x02014b50
	zip64ExtraTag   = 0x0001
	maxExtraField   = 0xFFFF
	zip32Saturated  = math.MaxUint32
	zip16Saturated  = math.MaxUint16
	directoryBuffer = maxExtraField + 1 // room to Peek at the largest extra field
)

// zipDirectory is where archive/zip's Reader will read the central directory from, and how many
// records the end record (or its zip64 form) declares.
type zipDirectory struct {
	declared uint64
	start    int64
}

// findZipDirectory locates the central directory exactly as archive/zip's readDirectoryEnd does
// (the same search for the end record, zip64 locator and base-offset correction), without
// parsing the directory: archive/zip allocates for every record before any limit could apply,
// so a 50 MiB archive of a million empty records would cost hundreds of MiB. ok is false when
// archive/zip would refuse the archive before reading any directory header (it then says what
// is wrong).
func findZipDirectory(r io.ReaderAt, size int64) (d zipDirectory, ok bool) {
	var rec []byte
	var end int64 = -1
	for _, n := range []int64{1024, 65 * 1024} {
		n = min(n, size)
		buf := make([]byte, n)
		if _, err := r.ReadAt(buf, size-n); err != nil && err != io.EOF {
			return d, false
		}
		if p := endRecordIn(buf); p >= 0 {
			rec, end = buf[p:], size-n+int64(p)
			break
		}
		if n == size {
			break
		}
	}
	if end < 0 {
		return d, false
	}
	d.declared = uint64(le16(rec[10:]))
	dirSize, dirOff := uint64(le32(rec[12:])), uint64(le32(rec[16:]))
	if d.declared == zip16Saturated || dirSize == zip16Saturated || dirOff == zip32Saturated {
		if end-eocd64LocLen >= 0 {
			loc := make([]byte, eocd64LocLen)
			if _, err := r.ReadAt(loc, end-eocd64LocLen); err != nil {
				return d, false
			}
			if le32(loc) == eocd64LocSig && le32(loc[4:]) == 0 && le32(loc[16:]) == 1 {
				if p := int64(le64(loc[8:])); p >= 0 {
					rec64 := make([]byte, eocd64Len)
					if _, err := r.ReadAt(rec64, p); err != nil || le32(rec64) != eocd64Sig {
						return d, false
					}
					end = p
					d.declared, dirSize, dirOff = le64(rec64[32:]), le64(rec64[40:]), le64(rec64[48:])
				}
			}
		}
	}
	if dirSize > math.MaxInt64 || dirOff > math.MaxInt64 {
		return d, false
	}
	// The same (wrapping) arithmetic as archive/zip, so an overflowing lie lands where it does there.
	base := end - int64(dirSize) - int64(dirOff)
	if d.start = base + int64(dirOff); d.start < 0 || d.start >= size {
		return d, false
	}
	if base > 0 {
		// archive/zip ignores a base offset when a header sits at the declared offset itself.
		off := int64(dirOff)
		if skipDirectoryHeader(bufio.NewReaderSize(io.NewSectionReader(r, off, size-off), directoryBuffer)) {
			d.start = off
		}
	}
	return d, true
}

// countDirectoryRecords counts the central-directory headers archive/zip's Reader will read from
// d.start: header after header until the first that is not one, whatever the end record's count
// and directory size say (archive/zip compares only the count mod 65536). It stops at limit+1 and
// allocates one read buffer, however many records there are.
func countDirectoryRecords(r io.ReaderAt, size int64, d zipDirectory, limit int) int {
	br := bufio.NewReaderSize(io.NewSectionReader(r, d.start, size-d.start), directoryBuffer)
	n := 0
	for n <= limit && skipDirectoryHeader(br) {
		n++
	}
	return n
}

// skipDirectoryHeader consumes one central-directory header and reports whether archive/zip's
// readDirectoryHeader would accept it: the signature, the name, extra field and comment present
// in full, and the zip64 fields a saturated size or offset needs.
func skipDirectoryHeader(br *bufio.Reader) bool {
	var h [dirHeaderLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil || le32(h[:]) != dirHeaderSig {
		return false
	}
	needUSize, needCSize := le32(h[24:]) == zip32Saturated, le32(h[20:]) == zip32Saturated
	needOffset := le32(h[42:]) == zip32Saturated
	nameLen, extraLen, commentLen := int(le16(h[28:])), int(le16(h[30:])), int(le16(h[32:]))
	if _, err := br.Discard(nameLen); err != nil {
		return false
	}
	extra, err := br.Peek(extraLen)
	if err != nil {
		return false
	}
	for len(extra) >= 4 {
		tag, n := le16(extra), int(le16(extra[2:]))
		extra = extra[4:]
		if len(extra) < n {
			break
		}
		field := extra[:n]
		extra = extra[n:]
		if tag != zip64ExtraTag {
			continue
		}
		for _, need := range []*bool{&needUSize, &needCSize, &needOffset} {
			if *need {
				if len(field) < 8 {
					return false
				}
				*need, field = false, field[8:]
			}
		}
	}
	if _, err := br.Discard(extraLen + commentLen); err != nil {
		return false
	}
	return !needCSize && !needOffset
}

// endRecordIn finds the end record in b as archive/zip's findSignatureInBlock does: the last
// signature with room for the record, or -1 when that one's comment would run past b.
func endRecordIn(b []byte) int {
	for i := len(b) - eocdLen; i >= 0; i-- {
		if le32(b[i:]) == eocdSig {
			if int(le16(b[i+eocdLen-2:]))+eocdLen+i > len(b) {
				return -1
			}
			return i
		}
	}
	return -1
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
