package codestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
)

// contract is what every Store must do.
func contract(t *testing.T, s codestore.Store) {
	ctx := context.Background()
	key := codestore.Key("sless-0123456789abcdef", "hello", strings.Repeat("a", 64))
	if ok, err := s.Exists(ctx, key); err != nil || ok {
		t.Fatalf("Exists before Put: %v %v", ok, err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, codestore.ErrNotFound) {
		t.Fatalf("Get before Put: %v, want ErrNotFound", err)
	}
	body := bytes.Repeat([]byte("zip bytes "), 1000)
	if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Exists(ctx, key); err != nil || !ok {
		t.Fatalf("Exists after Put: %v %v", ok, err)
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, body) {
		t.Fatalf("Get returned %d bytes, want %d", len(got), len(body))
	}
	other := codestore.Key("sless-0123456789abcdef", "hello2", strings.Repeat("b", 64))
	s.Put(ctx, other, strings.NewReader("x"), 1)
	second := codestore.Key("sless-0123456789abcdef", "hello", strings.Repeat("c", 64))
	s.Put(ctx, second, strings.NewReader("y"), 1)
	// A reader that cannot seek (a log written from memory): S3 over plain HTTP must take it too.
	unseekable := codestore.Key("sless-0123456789abcdef", "logs", strings.Repeat("d", 64))
	if err := s.Put(ctx, unseekable, io.MultiReader(strings.NewReader("not seekable")), 12); err != nil {
		t.Fatalf("Put of a reader that cannot seek: %v", err)
	}
	if got, err := s.List(ctx, codestore.Prefix("sless-0123456789abcdef", "hello")); err != nil || len(got) != 2 ||
		got[0].Key != key || got[1].Key != second || got[0].Size != int64(len(body)) || time.Since(got[1].Modified) > time.Hour {
		t.Errorf("List = %+v, %v; want %s and %s (not hello2's)", got, err, key, second)
	}
	if err := s.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Exists(ctx, other); ok {
		t.Errorf("Exists after Delete")
	}
	if err := s.Delete(ctx, other); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
	s.Put(ctx, other, strings.NewReader("x"), 1)
	if got, err := s.List(ctx, "nothing/here/"); err != nil || len(got) != 0 {
		t.Errorf("List of an empty prefix = %+v, %v", got, err)
	}
	if err := s.DeletePrefix(ctx, codestore.Prefix("sless-0123456789abcdef", "hello")); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{key: false, second: false, other: true} {
		if ok, _ := s.Exists(ctx, k); ok != want {
			t.Errorf("after DeletePrefix, Exists(%s) = %v, want %v (a prefix must not match hello2)", k, ok, want)
		}
	}
}

func TestDir(t *testing.T) {
	s, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	contract(t, s)
	for _, bad := range []string{"../escape", "/etc/passwd", "a/../../b", "", "a\\b"} {
		if err := s.Put(context.Background(), bad, strings.NewReader("x"), 1); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
	// A short write leaves nothing behind.
	if err := s.Put(context.Background(), "code/x/y/z.zip", strings.NewReader("abc"), 10); err == nil {
		t.Error("short body accepted")
	}
	if ok, _ := s.Exists(context.Background(), "code/x/y/z.zip"); ok {
		t.Error("a failed Put left an object")
	}
}

func TestS3(t *testing.T) {
	m := testenv.MinIO(t)
	ctx := context.Background()
	s, err := codestore.NewS3(ctx, codestore.S3Config{Bucket: "sless-code", Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatalf("EnsureBucket twice: %v", err)
	}
	contract(t, s)
	bad, _ := codestore.NewS3(ctx, codestore.S3Config{Bucket: "sless-code", Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: "wrong"})
	if _, err := bad.Exists(ctx, "code/x"); err == nil {
		t.Error("wrong credentials accepted")
	}
}

// slowReader hands out its bytes a chunk at a time with a pause before each: a slow client whose
// upload keeps moving.
type slowReader struct {
	*bytes.Reader
	chunk int
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause)
	return s.Reader.Read(p[:min(len(p), s.chunk)])
}

// An S3 server that is down (refuses connections) or hung (accepts them, answers nothing) is
// reported as ErrUnavailable within the timeout, writes nothing, and the store works again once
// the server is back; a body that keeps moving is not cut off however long it takes.
func TestS3Unavailable(t *testing.T) {
	m := testenv.MinIOProcess(t)
	ctx := context.Background()
	const timeout = time.Second
	s, err := codestore.NewS3(ctx, codestore.S3Config{Bucket: "sless-code", Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	kept := codestore.Key("sless-0123456789abcdef", "hello", strings.Repeat("a", 64))
	if err := s.Put(ctx, kept, strings.NewReader("before"), 6); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than the socket buffers take
	missing := codestore.Key("sless-0123456789abcdef", "hello", strings.Repeat("b", 64))

	for _, outage := range []struct {
		name     string
		down, up func() error
		within   time.Duration
	}{
		{"stopped", func() error { m.Stop(); return nil }, m.Start, timeout + time.Second},
		{"hung", m.Pause, m.Resume, timeout + 2*time.Second},
	} {
		t.Run(outage.name, func(t *testing.T) {
			if err := outage.down(); err != nil {
				t.Fatal(err)
			}
			ops := map[string]func() error{
				"Exists": func() error { _, err := s.Exists(ctx, kept); return err },
				"Get":    func() error { _, err := s.Get(ctx, kept); return err },
				"Put":    func() error { return s.Put(ctx, missing, bytes.NewReader(big), int64(len(big))) },
				"DeletePrefix": func() error {
					return s.DeletePrefix(ctx, codestore.Prefix("sless-0123456789abcdef", "other"))
				},
			}
			for name, op := range ops {
				start := time.Now()
				err := op()
				took := time.Since(start)
				t.Logf("%s while %s: %v after %v", name, outage.name, err, took.Round(time.Millisecond))
				if !errors.Is(err, codestore.ErrUnavailable) {
					t.Errorf("%s: %v, want ErrUnavailable", name, err)
				}
				if took > outage.within {
					t.Errorf("%s answered after %v, want within %v", name, took, outage.within)
				}
			}
			if err := outage.up(); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Exists(ctx, missing); ok || err != nil {
				t.Errorf("the cut-off Put left an object (%v, %v)", ok, err)
			}
			rc, err := s.Get(ctx, kept)
			if err != nil {
				t.Fatalf("after the outage: %v", err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "before" {
				t.Errorf("after the outage the object holds %q", b)
			}
		})
	}

	t.Run("a slow body that keeps moving", func(t *testing.T) {
		body := bytes.Repeat([]byte("x"), 32<<10)
		start := time.Now()
		// 8 reads of 4 KiB, 0.3 s apart, per pass over the body (the SDK reads it twice: checksum,
		// then send): far longer than the timeout.
		if err := s.Put(ctx, missing, &slowReader{bytes.NewReader(body), 4 << 10, 300 * time.Millisecond}, int64(len(body))); err != nil {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
		if took := time.Since(start); took < 2*timeout {
			t.Errorf("took %v: the test did not outlast the timeout", took)
		}
	})
	t.Run("a refusal is not an outage", func(t *testing.T) {
		bad, _ := codestore.NewS3(ctx, codestore.S3Config{Bucket: "sless-code", Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: "wrong"})
		if _, err := bad.Exists(ctx, kept); err == nil || errors.Is(err, codestore.ErrUnavailable) {
			t.Errorf("wrong credentials: %v", err)
		}
	})
}

// Deleting a function's prefix while its events are still being written (they are written
// behind its lifecycle) succeeds: a file that comes in while the tree is removed does not make
// the deletion fail with "directory not empty" (an API delete answered 500 on it).
func TestDirDeletePrefixWhileWritten(t *testing.T) {
	d, err := codestore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := strings.Repeat("x", 64)
			d.Put(ctx, fmt.Sprintf("ns/fn/logs/events-%d.json", i%8), strings.NewReader(body), int64(len(body)))
		}
	}()
	for i := range 300 {
		for j := range 20 {
			body := "y"
			if err := d.Put(ctx, fmt.Sprintf("ns/fn/code/%d-%d.zip", i, j), strings.NewReader(body), 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.DeletePrefix(ctx, "ns/fn/"); err != nil {
			close(stop)
			<-done
			t.Fatalf("deletion %d while events are written: %v", i, err)
		}
	}
	close(stop)
	<-done
}
