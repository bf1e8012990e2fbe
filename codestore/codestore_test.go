package codestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

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
