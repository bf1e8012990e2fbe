package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/sless-dev/sless/codestore"
)

type putRecorder struct {
	codestore.Store
	got io.Reader
}

func (p *putRecorder) Put(_ context.Context, _ string, r io.Reader, _ int64) error {
	p.got = r
	return nil
}

// What is written from memory reaches S3 seekable (over plain HTTP the SDK refuses a body it
// cannot rewind); other readers pass as they are.
func TestSeekablePuts(t *testing.T) {
	rec := &putRecorder{}
	s := seekablePuts{rec}
	s.Put(context.Background(), "k", bytes.NewBufferString("line\n"), 5)
	sk, ok := rec.got.(io.ReadSeeker)
	if !ok {
		t.Fatalf("a *bytes.Buffer reached the store as %T", rec.got)
	}
	if b, _ := io.ReadAll(sk); string(b) != "line\n" {
		t.Errorf("body %q", b)
	}
	r := strings.NewReader("zip")
	s.Put(context.Background(), "k", r, 3)
	if rec.got != r {
		t.Errorf("another reader was replaced: %T", rec.got)
	}
}
