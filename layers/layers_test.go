package layers_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/sless-dev/sless/layers"
)

type zfile struct {
	name string
	body string
	mode fs.FileMode // 0 means 0644 regular
}

func makeZip(t testing.TB, files ...zfile) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fromZip(b []byte, opts ...layers.Option) (*layers.Layer, error) {
	return layers.FromZip(bytes.NewReader(b), int64(len(b)), opts...)
}

type tarEntry struct {
	name string
	mode int64
	typ  byte
	body string
}

func readTar(t *testing.T, l *layers.Layer) []tarEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []tarEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q, want 0:0", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		body, _ := io.ReadAll(tr)
		out = append(out, tarEntry{h.Name, h.Mode, h.Typeflag, string(body)})
	}
}

func TestZipLayout(t *testing.T) {
	z := makeZip(t,
		zfile{name: "sub/deep/util.py", body: "x = 1\n"},
		zfile{name: "handler.py", body: "def handle(e):\n    return e\n"},
		zfile{name: "run.sh", body: "#!/bin/sh\n", mode: 0o700},
		zfile{name: "./lib/", mode: fs.ModeDir | 0o700},
	)
	l, err := fromZip(z)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := validate.Layer(l); err != nil {
		t.Fatalf("validate.Layer: %v", err)
	}
	got := readTar(t, l)
	want := []tarEntry{
		{"app/", 0o755, tar.TypeDir, ""},
		{"app/function/", 0o755, tar.TypeDir, ""},
		{"app/function/handler.py", 0o644, tar.TypeReg, "def handle(e):\n    return e\n"},
		{"app/function/lib/", 0o755, tar.TypeDir, ""},
		{"app/function/run.sh", 0o755, tar.TypeReg, "#!/bin/sh\n"},
		{"app/function/sub/", 0o755, tar.TypeDir, ""},
		{"app/function/sub/deep/", 0o755, tar.TypeDir, ""},
		{"app/function/sub/deep/util.py", 0o644, tar.TypeReg, "x = 1\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if l.Files() != 3 {
		t.Errorf("Files() = %d, want 3", l.Files())
	}
}

// Golden digests: any change that moves one must be deliberate (it changes every user's image digest).
func TestGoldenDigests(t *testing.T) {
	hello := makeZip(t, zfile{name: "handler.py", body: "def handle(event):\n    return {\"hello\": \"world\"}\n"})
	for _, tc := range []struct {
		name           string
		build          func() (*layers.Layer, error)
		digest, diffID string
	}{{
		name:   "zip hello",
		build:  func() (*layers.Layer, error) { return fromZip(hello) },
		digest: "sha256:809f15be4b38a4a93d9c82510993fae49f139f64c839de1559d70985b3ba787e",
		diffID: "sha256:d0365d0d0d0aee37d40389bc502148ac5397aa148285baa4bb388a22e1a74cbd",
	}, {
		name: "zip hello, docker media type, mtime 2024",
		build: func() (*layers.Layer, error) {
			return fromZip(hello, layers.WithMediaType(types.DockerLayer), layers.WithModTime(time.Unix(1704067200, 0)))
		},
		digest: "sha256:2c41b827e4d934bd56593449e48f30b470158f64d1ae21f96f698ef5c48e876b",
		diffID: "sha256:8d54a4e2a83f98f0963ab0c714d3d1bf4813a53aaceebad45f6904bb88b91f39",
	}, {
		name: "fs nested with exec, prefix /app/deps",
		build: func() (*layers.Layer, error) {
			return layers.FromFS(fstest.MapFS{
				"pkg/__init__.py": {Data: []byte("")},
				"pkg/mod.py":      {Data: []byte("A = 1\n")},
				"bin/tool":        {Data: []byte("#!/bin/sh\n"), Mode: 0o755},
			}, layers.WithPrefix("/app/deps"))
		},
		digest: "sha256:3e41b6054890e3543f4a33bfb36e5ad20767eb9d280571c90a328e331138a6ae",
		diffID: "sha256:ce419244e25191d7c751f881d7d9856b274a108aad0f5a0b4045e202c05bf3b2",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			d, _ := l.Digest()
			id, _ := l.DiffID()
			if d.String() != tc.digest || id.String() != tc.diffID {
				t.Errorf("digest %s diffID %s, want %s %s", d, id, tc.digest, tc.diffID)
			}
			t.Run("check determinism", func(t *testing.T) {
				l2, err := tc.build()
				if err != nil {
					t.Fatal(err)
				}
				defer l2.Close()
				if d2, _ := l2.Digest(); d2 != d {
					t.Errorf("rebuild gave %s, first build %s", d2, d)
				}
			})
		})
	}
}

// The same files in another order, with other timestamps and permissions, give the same layer.
func TestZipNormalisation(t *testing.T) {
	a := makeZip(t, zfile{name: "a.py", body: "a"}, zfile{name: "b/c.py", body: "c"})
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range []zfile{{name: "b/c.py", body: "c", mode: 0o600}, {name: "b/", mode: fs.ModeDir | 0o700}, {name: "a.py", body: "a", mode: 0o664}} {
		h := &zip.FileHeader{Name: f.name, Method: zip.Store, Modified: time.Now()}
		h.SetMode(f.mode)
		w, _ := zw.CreateHeader(h)
		io.WriteString(w, f.body)
	}
	zw.Close()
	la, err := fromZip(a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := fromZip(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	da, _ := la.Digest()
	db, _ := lb.Digest()
	if da != db {
		t.Errorf("digests differ: %s vs %s", da, db)
	}
}

func TestZipRejections(t *testing.T) {
	big := strings.Repeat("0", 10<<20)
	valid := makeZip(t, zfile{name: "handler.py", body: "def handle(e): return e\n"})
	for _, tc := range []struct {
		name  string
		zip   []byte
		opts  []layers.Option
		want  error
		inMsg string
	}{
		{"parent traversal", makeZip(t, zfile{name: "../evil.py", body: "x"}), nil, layers.ErrUnsafePath, ".."},
		{"nested traversal", makeZip(t, zfile{name: "a/../../evil.py", body: "x"}), nil, layers.ErrUnsafePath, ".."},
		{"absolute", makeZip(t, zfile{name: "/etc/passwd", body: "x"}), nil, layers.ErrUnsafePath, "absolute"},
		{"windows traversal", makeZip(t, zfile{name: `..\evil.py`, body: "x"}), nil, layers.ErrUnsafePath, "backslash"},
		{"drive letter", makeZip(t, zfile{name: "C:/x.py", body: "x"}), nil, layers.ErrUnsafePath, "absolute"},
		{"symlink", makeZip(t, zfile{name: "link", body: "/etc/passwd", mode: fs.ModeSymlink | 0o777}), nil, layers.ErrUnsupportedType, "symlink"},
		{"device", makeZip(t, zfile{name: "dev", mode: fs.ModeDevice | 0o644}), nil, layers.ErrUnsupportedType, "device"},
		{"fifo", makeZip(t, zfile{name: "pipe", mode: fs.ModeNamedPipe | 0o644}), nil, layers.ErrUnsupportedType, "pipe"},
		{"whiteout", makeZip(t, zfile{name: "sub/.wh.handler.py", body: ""}), nil, layers.ErrUnsafePath, "whiteout"},
		{"opaque whiteout", makeZip(t, zfile{name: ".wh..wh..opq", body: ""}), nil, layers.ErrUnsafePath, "whiteout"},
		{"NUL byte", makeZip(t, zfile{name: "a\x00b.py", body: "x"}), nil, layers.ErrUnsafePath, "NUL"},
		{"invalid UTF-8", makeZip(t, zfile{name: "a\xff.py", body: "x"}), nil, layers.ErrUnsafePath, "UTF-8"},
		{"duplicate", makeZip(t, zfile{name: "a.py", body: "1"}, zfile{name: "a.py", body: "2"}), nil, layers.ErrDuplicate, "more than once"},
		{"duplicate via ./", makeZip(t, zfile{name: "a.py", body: "1"}, zfile{name: "./a.py", body: "2"}), nil, layers.ErrDuplicate, "more than once"},
		{"case only", makeZip(t, zfile{name: "Handler.py", body: "1"}, zfile{name: "handler.py", body: "2"}), nil, layers.ErrDuplicate, "case"},
		{"case only dir", makeZip(t, zfile{name: "Lib/a.py", body: "1"}, zfile{name: "lib/b.py", body: "2"}), nil, layers.ErrDuplicate, "case"},
		{"file and dir", makeZip(t, zfile{name: "a", body: "1"}, zfile{name: "a/b.py", body: "2"}), nil, layers.ErrDuplicate, "directory"},
		{"too many entries", makeZip(t, zfile{name: "a", body: "1"}, zfile{name: "b", body: "2"}, zfile{name: "c", body: "3"}), []layers.Option{layers.WithMaxEntries(2)}, layers.ErrTooManyEntries, "more than 2"},
		{"too large", makeZip(t, zfile{name: "a", body: "12345"}, zfile{name: "b", body: "678"}), []layers.Option{layers.WithMaxBytes(7)}, layers.ErrTooLarge, "limit of 7"},
		{"zip bomb", makeZip(t, zfile{name: "zeros", body: big}), nil, layers.ErrCompressionRatio, "200:1"},
		{"not a zip", []byte("this is not a zip archive at all"), nil, layers.ErrInvalidArchive, "not a readable zip"},
		{"empty body", nil, nil, layers.ErrInvalidArchive, "0 bytes"},
		{"empty zip", makeZip(t), nil, layers.ErrInvalidArchive, "no files"},
		{"truncated", valid[:len(valid)-10], nil, layers.ErrInvalidArchive, "not a readable zip"},
		{"file as root", makeZip(t, zfile{name: ".", body: "x"}), nil, layers.ErrUnsafePath, "root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			l, err := fromZip(tc.zip, append(tc.opts, layers.WithTempDir(tmp), layers.WithSpoolMemory(1))...)
			if err == nil {
				l.Close()
				t.Fatal("accepted; want an error")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error %q does not mention %q", err, tc.inMsg)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("left %d temporary files behind", len(left))
			}
			if verr := layers.ValidateZip(bytes.NewReader(tc.zip), int64(len(tc.zip)), tc.opts...); !errors.Is(verr, tc.want) {
				t.Errorf("ValidateZip: %v, want %v", verr, tc.want)
			}
		})
	}
	if err := layers.ValidateZip(bytes.NewReader(valid), int64(len(valid))); err != nil {
		t.Errorf("ValidateZip of a valid archive: %v", err)
	}
}

// rawZip writes one stored entry whose header declares declared bytes while data holds more or
// less, and whose CRC matches data: what a hostile client can send.
func rawZip(t *testing.T, name string, data []byte, declared uint64, method uint16) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	payload := data
	if method == zip.Deflate {
		var c bytes.Buffer
		fw, _ := zipDeflater(&c)
		fw.Write(data)
		fw.Close()
		payload = c.Bytes()
	}
	w, err := zw.CreateRaw(&zip.FileHeader{
		Name: name, Method: method, CRC32: crc32.ChecksumIEEE(data),
		CompressedSize64: uint64(len(payload)), UncompressedSize64: declared,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(payload)
	zw.Close()
	return buf.Bytes()
}

func TestZipLyingSizes(t *testing.T) {
	zeros := bytes.Repeat([]byte{0}, 20<<20)
	t.Run("declares less than it holds", func(t *testing.T) {
		_, err := fromZip(rawZip(t, "bomb", zeros, 100, zip.Deflate))
		if !errors.Is(err, layers.ErrInvalidArchive) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("declares more than it holds", func(t *testing.T) {
		_, err := fromZip(rawZip(t, "short", []byte("abc"), 10, zip.Store))
		if !errors.Is(err, layers.ErrInvalidArchive) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("declares an absurd size", func(t *testing.T) {
		_, err := fromZip(rawZip(t, "huge", []byte("abc"), 1<<62, zip.Store))
		if !errors.Is(err, layers.ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("corrupted data", func(t *testing.T) {
		z := rawZip(t, "data.txt", []byte(strings.Repeat("hello ", 100)), 600, zip.Store)
		i := bytes.Index(z, []byte("hello hello"))
		z[i] = 'j'
		_, err := fromZip(z)
		if !errors.Is(err, layers.ErrInvalidArchive) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDefaultEntryLimit(t *testing.T) {
	files := make([]zfile, layers.DefaultMaxEntries+1)
	for i := range files {
		files[i] = zfile{name: "f/" + strings.Repeat("x", 3) + string(rune('a'+i%26)) + "/" + itoa(i)}
	}
	_, err := fromZip(makeZip(t, files...))
	if !errors.Is(err, layers.ErrTooManyEntries) {
		t.Fatalf("got %v", err)
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func TestFSRejections(t *testing.T) {
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "handler.py"), []byte("x"), 0o644)
		os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
		_, err := layers.FromFS(os.DirFS(dir))
		if !errors.Is(err, layers.ErrUnsupportedType) || !strings.Contains(err.Error(), "symlink") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("hardlink", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "a.py"), []byte("x"), 0o644)
		if err := os.Link(filepath.Join(dir, "a.py"), filepath.Join(dir, "b.py")); err != nil {
			t.Fatalf("cannot make a hardlink here: %v", err)
		}
		_, err := layers.FromFS(os.DirFS(dir))
		if !errors.Is(err, layers.ErrUnsupportedType) || !strings.Contains(err.Error(), "hardlink") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		dir := t.TempDir()
		if err := mkfifo(filepath.Join(dir, "pipe")); err != nil {
			t.Fatalf("mkfifo: %v", err)
		}
		_, err := layers.FromFS(os.DirFS(dir))
		if !errors.Is(err, layers.ErrUnsupportedType) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("whiteout", func(t *testing.T) {
		_, err := layers.FromFS(fstest.MapFS{".wh.x": {Data: []byte("")}})
		if !errors.Is(err, layers.ErrUnsafePath) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("case only", func(t *testing.T) {
		_, err := layers.FromFS(fstest.MapFS{"A.py": {}, "a.py": {}})
		if !errors.Is(err, layers.ErrDuplicate) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		_, err := layers.FromFS(fstest.MapFS{"a": {Data: make([]byte, 100)}}, layers.WithMaxBytes(99))
		if !errors.Is(err, layers.ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
	})
}

// A layer past the spool threshold lives in a temporary file that Close removes.
func TestSpoolToFile(t *testing.T) {
	tmp := t.TempDir()
	dir := t.TempDir()
	rnd := make([]byte, 256<<10)
	for i := range rnd {
		rnd[i] = byte(i*7919 + i>>3)
	}
	os.WriteFile(filepath.Join(dir, "blob.bin"), rnd, 0o644)
	l, err := layers.FromFS(os.DirFS(dir), layers.WithTempDir(tmp), layers.WithSpoolMemory(1024))
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 1 {
		t.Fatalf("want one spool file, have %d", len(left))
	}
	if err := validate.Layer(l); err != nil {
		t.Fatal(err)
	}
	mem, err := layers.FromFS(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l.Digest()
	d2, _ := mem.Digest()
	if d1 != d2 {
		t.Errorf("file-spooled digest %s != in-memory %s", d1, d2)
	}
	l.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("Close left %d files", len(left))
	}
}

func TestFSSymlinksWithinTree(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "pkg", "bin"), 0o755)
	os.WriteFile(filepath.Join(dir, "pkg", "cli.js"), []byte("x"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".bin"), 0o755)
	os.Symlink("../pkg/cli.js", filepath.Join(dir, ".bin", "cli"))
	l, err := layers.FromFS(os.DirFS(dir), layers.WithPrefix("/app/node_modules"), layers.WithSymlinks())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	found := false
	for _, e := range readTar(t, l) {
		if e.name == "app/node_modules/.bin/cli" && e.typ == tar.TypeSymlink {
			found = true
		}
	}
	if !found {
		t.Error("the link is not in the layer")
	}
	for _, bad := range []string{"/etc/passwd", "../../outside", "../../../etc"} {
		d := t.TempDir()
		os.MkdirAll(filepath.Join(d, "a"), 0o755)
		os.Symlink(bad, filepath.Join(d, "a", "link"))
		if _, err := layers.FromFS(os.DirFS(d), layers.WithSymlinks()); !errors.Is(err, layers.ErrUnsupportedType) {
			t.Errorf("link to %s: %v", bad, err)
		}
	}
}

// A small zip of deep paths must not cost memory per parent directory without bound.
func TestDeepPaths(t *testing.T) {
	deep := "a/" + strings.Repeat("b/", 200) + "f"
	if _, err := fromZip(makeZip(t, zfile{name: deep, body: "x"})); !errors.Is(err, layers.ErrUnsafePath) {
		t.Errorf("200 levels: %v", err)
	}
	long := strings.Repeat("n", 5000)
	if _, err := fromZip(makeZip(t, zfile{name: long, body: "x"})); !errors.Is(err, layers.ErrUnsafePath) {
		t.Errorf("5000-byte name: %v", err)
	}
	// Parent directories count: 3 files in 100 distinct 20-deep trees exceed a 1,000-entry limit.
	var files []zfile
	for i := 0; i < 100; i++ {
		files = append(files, zfile{name: fmt.Sprintf("t%d/%sf", i, strings.Repeat("d/", 20)), body: "x"})
	}
	if _, err := fromZip(makeZip(t, files...), layers.WithMaxEntries(1000)); !errors.Is(err, layers.ErrTooManyEntries) {
		t.Errorf("implicit directories not counted: %v", err)
	}
}

// WithExecutable (a provided function's bootstrap): the file must be at the root, a regular file,
// with an execute bit; each bad case is refused by FromZip, ValidateZip and FromFS alike, naming
// the file.
func TestExecutableRequired(t *testing.T) {
	opt := layers.WithExecutable("bootstrap")
	for _, tc := range []struct {
		name  string
		files []zfile
		want  error
		says  string
	}{
		{"missing", []zfile{{name: "main.go", body: "package main"}}, layers.ErrNotExecutable, "missing"},
		{"in a subdirectory", []zfile{{name: "bin/bootstrap", body: "x", mode: 0o755}}, layers.ErrNotExecutable, "not in a subdirectory"},
		{"nested elsewhere", []zfile{{name: "sub/bootstrap", body: "x", mode: 0o755}}, layers.ErrNotExecutable, "missing"},
		{"other case", []zfile{{name: "Bootstrap", body: "x", mode: 0o755}}, layers.ErrNotExecutable, "case-sensitive"},
		{"no x bit", []zfile{{name: "bootstrap", body: "#!/bin/sh\n", mode: 0o644}}, layers.ErrNotExecutable, "not executable"},
		{"no mode at all", []zfile{{name: "bootstrap", body: "#!/bin/sh\n", mode: 0o600}}, layers.ErrNotExecutable, "not executable"},
		{"a directory", []zfile{{name: "bootstrap/", mode: fs.ModeDir | 0o755}}, layers.ErrNotExecutable, "is a directory"},
		{"a symlink", []zfile{{name: "bootstrap", body: "/bin/sh", mode: fs.ModeSymlink | 0o777}}, layers.ErrUnsupportedType, "symlink"},
		{"a directory by its content", []zfile{{name: "bootstrap/run", body: "x", mode: 0o755}}, layers.ErrNotExecutable, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := makeZip(t, tc.files...)
			_, err := fromZip(z, opt)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("FromZip: %v; want %v saying %q", err, tc.want, tc.says)
			}
			if tc.want == layers.ErrNotExecutable && !strings.Contains(err.Error(), `"bootstrap"`) {
				t.Errorf("the error does not name bootstrap: %v", err)
			}
			if verr := layers.ValidateZip(bytes.NewReader(z), int64(len(z)), opt); !errors.Is(verr, tc.want) {
				t.Errorf("ValidateZip: %v", verr)
			}
			// Without the option the same archive is fine (unless it is bad anyway).
			if tc.want == layers.ErrNotExecutable {
				if l, err := fromZip(z); err != nil {
					t.Errorf("without WithExecutable: %v", err)
				} else {
					l.Close()
				}
			}
		})
	}
	t.Run("fs", func(t *testing.T) {
		for name, fsys := range map[string]fstest.MapFS{
			"missing":   {"main.go": {Data: []byte("x")}},
			"no x bit":  {"bootstrap": {Data: []byte("x"), Mode: 0o644}},
			"directory": {"bootstrap/x": {Data: []byte("x"), Mode: 0o755}},
		} {
			if _, err := layers.FromFS(fsys, opt); !errors.Is(err, layers.ErrNotExecutable) {
				t.Errorf("%s: %v", name, err)
			}
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "real"), []byte("x"), 0o755)
		os.Symlink("real", filepath.Join(dir, "bootstrap"))
		if _, err := layers.FromFS(os.DirFS(dir), opt, layers.WithSymlinks()); !errors.Is(err, layers.ErrNotExecutable) {
			t.Errorf("symlink kept by WithSymlinks: %v", err)
		}
	})
	if err := layers.WithExecutable("a/b")(nil); err == nil {
		t.Error("a path was accepted as the executable's name")
	}
}

// A zip's setuid, setgid and sticky bits, group/world-writable modes and odd permissions never
// reach the layer: files are 0755 (any x bit) or 0644, so a bootstrap of mode 4755 runs as the
// function's user, never as the file's owner.
func TestExecutableModesNormalised(t *testing.T) {
	z := makeZip(t,
		zfile{name: "bootstrap", body: "\x7fELF", mode: fs.ModeSetuid | 0o755},
		zfile{name: "sgid", body: "x", mode: fs.ModeSetgid | 0o2711},
		zfile{name: "sticky", body: "x", mode: fs.ModeSticky | 0o777},
		zfile{name: "xonly", body: "x", mode: 0o100},
		zfile{name: "writable", body: "x", mode: 0o666},
	)
	l, err := fromZip(z, layers.WithExecutable("bootstrap"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := map[string]int64{"app/function/bootstrap": 0o755, "app/function/sgid": 0o755, "app/function/sticky": 0o755,
		"app/function/xonly": 0o755, "app/function/writable": 0o644}
	for _, e := range readTar(t, l) {
		if m, ok := want[e.name]; ok && e.mode != m {
			t.Errorf("%s: mode %o, want %o", e.name, e.mode, m)
		}
		if e.mode&^0o777 != 0 {
			t.Errorf("%s: mode %o keeps special bits", e.name, e.mode)
		}
	}
}
