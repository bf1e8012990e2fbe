package layers_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/sless-dev/sless/layers"
)

// bombDirectory is a zip of n empty central-directory records (47 bytes each, no local headers,
// no data): what a million tiny entries look like to a parser that reads the directory first.
func bombDirectory(n int, zip64 bool) []byte {
	var b bytes.Buffer
	rec := make([]byte, 46)
	binary.LittleEndian.PutUint32(rec[0:], 0x02014b50)
	binary.LittleEndian.PutUint16(rec[28:], 1) // name length
	for range n {
		b.Write(rec)
		b.WriteByte('a')
	}
	dirSize := b.Len()
	count := uint16(n)
	if zip64 || n > 0xFFFF {
		count = 0xFFFF
		// zip64 end record and its locator
		z := make([]byte, 56)
		binary.LittleEndian.PutUint32(z[0:], 0x06064b50)
		binary.LittleEndian.PutUint64(z[4:], 44)
		binary.LittleEndian.PutUint64(z[24:], uint64(n))
		binary.LittleEndian.PutUint64(z[32:], uint64(n))
		binary.LittleEndian.PutUint64(z[40:], uint64(dirSize))
		zoff := b.Len()
		b.Write(z)
		l := make([]byte, 20)
		binary.LittleEndian.PutUint32(l[0:], 0x07064b50)
		binary.LittleEndian.PutUint64(l[8:], uint64(zoff))
		binary.LittleEndian.PutUint32(l[16:], 1)
		b.Write(l)
	}
	e := make([]byte, 22)
	binary.LittleEndian.PutUint32(e[0:], 0x06054b50)
	binary.LittleEndian.PutUint16(e[8:], count)
	binary.LittleEndian.PutUint16(e[10:], count)
	binary.LittleEndian.PutUint32(e[12:], uint32(dirSize))
	b.Write(e)
	return b.Bytes()
}

// A ~50 MiB archive declaring 1.1 million entries is refused from its end record, before
// archive/zip allocates for every record (~250 MB before this check).
func TestDirectoryBombRefusedBeforeParsing(t *testing.T) {
	z := bombDirectory(1_100_000, false)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := layers.ValidateZip(bytes.NewReader(z), int64(len(z)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, layers.ErrTooManyEntries) {
		t.Fatalf("%d-byte directory bomb: %v, want ErrTooManyEntries", len(z), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("refusing it allocated %d MiB, want < 32", alloc>>20)
	}
	t.Logf("%.1f MiB archive refused: %v", float64(len(z))/(1<<20), err)

	// The count read from a small classic archive and from a zip64 end record.
	small := bombDirectory(3, true)
	if err := layers.ValidateZip(bytes.NewReader(small), int64(len(small)), layers.WithMaxEntries(2)); !errors.Is(err, layers.ErrTooManyEntries) {
		t.Errorf("zip64 end record declaring 3 entries, limit 2: %v", err)
	}
}
