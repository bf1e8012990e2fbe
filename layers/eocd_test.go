package layers_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
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

// countBomb is the archive of issue 27: one local header (an empty stored file "a"), then n
// central-directory records that all name it, and an end record at the directory's true offset
// declaring `declared` entries and a directory of dirSize bytes (-1: its true size). archive/zip
// reads records until the first bad one whatever the end record says, and checks the count only
// mod 65536, so n = 2^20 declaring 0 entries (and even 0 bytes) parses.
func countBomb(n, declared, dirSize int) []byte {
	var b bytes.Buffer
	local := make([]byte, 30)
	binary.LittleEndian.PutUint32(local[0:], 0x04034b50)
	binary.LittleEndian.PutUint16(local[26:], 1)
	b.Write(local)
	b.WriteByte('a')
	dirOff := b.Len()
	rec := make([]byte, 46)
	binary.LittleEndian.PutUint32(rec[0:], 0x02014b50)
	binary.LittleEndian.PutUint16(rec[28:], 1)
	b.Grow(n * 47)
	for range n {
		b.Write(rec)
		b.WriteByte('a')
	}
	if dirSize < 0 {
		dirSize = b.Len() - dirOff
	}
	e := make([]byte, 22)
	binary.LittleEndian.PutUint32(e[0:], 0x06054b50)
	binary.LittleEndian.PutUint16(e[8:], uint16(declared))
	binary.LittleEndian.PutUint16(e[10:], uint16(declared))
	binary.LittleEndian.PutUint32(e[12:], uint32(dirSize))
	binary.LittleEndian.PutUint32(e[16:], uint32(dirOff))
	b.Write(e)
	return b.Bytes()
}

// validateAlloc runs ValidateZip and reports how many bytes it allocated.
func validateAlloc(z []byte, opts ...layers.Option) (error, uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := layers.ValidateZip(bytes.NewReader(z), int64(len(z)), opts...)
	runtime.ReadMemStats(&after)
	return err, after.TotalAlloc - before.TotalAlloc
}

// A ~50 MiB archive declaring 1.1 million entries is refused from its end record, before
// archive/zip allocates for every record (~250 MB before this check).
func TestDirectoryBombRefusedBeforeParsing(t *testing.T) {
	z := bombDirectory(1_100_000, false)
	err, alloc := validateAlloc(z)
	if !errors.Is(err, layers.ErrTooManyEntries) {
		t.Fatalf("%d-byte directory bomb: %v, want ErrTooManyEntries", len(z), err)
	}
	if alloc > 16<<20 {
		t.Errorf("refusing it allocated %d MiB, want < 16", alloc>>20)
	}
	t.Logf("%.1f MiB archive refused: %v", float64(len(z))/(1<<20), err)

	// The count read from a small classic archive and from a zip64 end record.
	small := bombDirectory(3, true)
	if err := layers.ValidateZip(bytes.NewReader(small), int64(len(small)), layers.WithMaxEntries(2)); !errors.Is(err, layers.ErrTooManyEntries) {
		t.Errorf("zip64 end record declaring 3 entries, limit 2: %v", err)
	}
}

// The attack of issue 27: 2^20 records behind an end record that declares 0 of them (2^20 mod
// 65536), and variants that also lie about the directory's size, were refused only after
// archive/zip had allocated ~230 MB for the records ("duplicate entry", 0.7 s). The records are
// now counted as archive/zip will read them, and the archive is refused with a few KiB.
func TestDirectoryCountBombRefusedBeforeParsing(t *testing.T) {
	const n = 1 << 20
	for _, c := range []struct {
		name              string
		declared, dirSize int
	}{
		{"declares 0 entries", 0, -1},
		{"declares 0 entries in 0 bytes", 0, 0},
		{"declares 1 entry of 47 bytes", 1, 47},
	} {
		t.Run(c.name, func(t *testing.T) {
			z := countBomb(n, c.declared, c.dirSize)
			if got, ok := layers.CountZipRecords(bytes.NewReader(z), int64(len(z)), n); !ok || got != n {
				t.Fatalf("the bomb holds %d records (found %v), want %d: it no longer tests the attack", got, ok, n)
			}
			err, alloc := validateAlloc(z)
			if !errors.Is(err, layers.ErrTooManyEntries) {
				t.Errorf("%.1f MiB count bomb: %v, want ErrTooManyEntries", float64(len(z))/(1<<20), err)
			}
			if alloc >= 16<<20 {
				t.Errorf("refusing it allocated %.1f MiB, want < 16", float64(alloc)/(1<<20))
			}
			t.Logf("%.1f MiB archive refused with %.0f KiB allocated: %v", float64(len(z))/(1<<20), float64(alloc)/(1<<10), err)
		})
	}
}

// Directory records are counted, not estimated from the directory's size: an archive of long
// names at the entry limit is accepted, one more entry is refused.
func TestEntryLimitWithLongNames(t *testing.T) {
	const limit = 400
	files := make([]zfile, limit+1)
	for i := range files {
		files[i] = zfile{name: strings.Repeat("n", 4000) + itoa(i), body: itoa(i)}
	}
	atLimit := makeZip(t, files[:limit]...)
	if err := layers.ValidateZip(bytes.NewReader(atLimit), int64(len(atLimit)), layers.WithMaxEntries(limit)); err != nil {
		t.Fatalf("%d entries with 4 KB names, limit %d: %v", limit, limit, err)
	}
	over := makeZip(t, files...)
	err := layers.ValidateZip(bytes.NewReader(over), int64(len(over)), layers.WithMaxEntries(limit))
	if !errors.Is(err, layers.ErrTooManyEntries) {
		t.Fatalf("%d entries, limit %d: %v, want ErrTooManyEntries", limit+1, limit, err)
	}
}

// The walk finds the records archive/zip reads: the same count on archives as zip.Writer makes
// them, with a comment, behind a prefix (a self-extracting archive, where archive/zip corrects the
// base offset), in zip64 form, and on the lying bombs.
func TestDirectoryWalkMatchesArchiveZip(t *testing.T) {
	plain := makeZip(t, zfile{name: "a.py", body: "x"}, zfile{name: "d/", mode: 0o755 | 1<<31}, zfile{name: "d/b.py", body: "y"})
	withComment := func(c string) []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		for _, name := range []string{"x", "y/z"} {
			if _, err := zw.Create(name); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.SetComment(c); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for name, z := range map[string][]byte{
		"plain":                plain,
		"comment":              withComment(strings.Repeat("c", 2000)), // past archive/zip's first 1 KiB look
		"prefixed":             append(bytes.Repeat([]byte{'#'}, 5000), plain...),
		"zip64 end record":     bombDirectory(70_000, true),
		"count bomb":           countBomb(70_000, 70_000, -1),
		"count bomb, 0 bytes":  countBomb(70_000, 70_000, 0),
		"count bomb, 47 bytes": countBomb(70_000, 70_000-65_536, 47),
	} {
		zr, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
		if err != nil {
			t.Fatalf("%s: archive/zip: %v", name, err)
		}
		got, ok := layers.CountZipRecords(bytes.NewReader(z), int64(len(z)), 1<<30)
		if !ok || got != len(zr.File) {
			t.Errorf("%s: walk counted %d (found %v), archive/zip read %d records", name, got, ok, len(zr.File))
		}
	}
	// Where archive/zip finds no directory, neither does the walk.
	for name, z := range map[string][]byte{
		"no end record":              []byte("not a zip at all"),
		"end record in the comment":  withComment(strings.Repeat("PK\x05\x06", 100)),
		"directory before the start": countBomb(3, 3, 0xFFFF),
	} {
		if _, err := zip.NewReader(bytes.NewReader(z), int64(len(z))); !errors.Is(err, zip.ErrFormat) {
			t.Fatalf("%s: archive/zip: %v, want zip.ErrFormat", name, err)
		}
		if n, ok := layers.CountZipRecords(bytes.NewReader(z), int64(len(z)), 10); ok {
			t.Errorf("%s: the walk found a directory of %d records", name, n)
		}
	}
}

// The issue 27 bomb (2^20 directory records, 0 declared) through ValidateZip, beside what parsed
// it before the walk: archive/zip's reader alone (which ValidateZip called first). B/op is the
// figure: the reader's allocation grows with the records, the walk's does not.
func BenchmarkDirectoryCountBomb(b *testing.B) {
	z := countBomb(1<<20, 0, -1)
	b.Run("ValidateZip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := layers.ValidateZip(bytes.NewReader(z), int64(len(z))); !errors.Is(err, layers.ErrTooManyEntries) {
				b.Fatal(err)
			}
		}
	})
	b.Run("anchor=archive-zip-NewReader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := zip.NewReader(bytes.NewReader(z), int64(len(z))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
