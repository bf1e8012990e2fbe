package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"testing"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/auth"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/internal/testenv"
)

// Uploads through the API into a real S3 server: a good archive lands under its sha256, a bad one
// leaves the bucket as it was.
func TestUploadToS3(t *testing.T) {
	m := testenv.MinIO(t)
	ctx := context.Background()
	s3, err := codestore.NewS3(ctx, codestore.S3Config{Bucket: "uploads", Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	v, _ := auth.New(auth.WithHS256Secret(apitest.Secret))
	e := apitest.NewEnvWith(t, apitest.Memstore, s3, "", v)
	e.Ensure()
	e.Function("f")

	bad := apitest.ZipOf(t, map[string]string{"../escape.py": "x"})
	if code, ecode, _ := e.Raw("POST", "/v1/namespaces/"+e.NS+"/functions/f/upload", e.Token, "application/zip", bad); code != 400 || ecode != "invalid_archive" {
		t.Fatalf("bad archive: %d %s", code, ecode)
	}
	if ok, err := s3.Exists(ctx, codestore.Key(e.NS, "f", fmt.Sprintf("%x", sha256.Sum256(bad)))); ok || err != nil {
		t.Fatalf("the refused archive reached S3 (%v)", err)
	}
	z := apitest.ZipOf(t, map[string]string{"handler.py": "def handle(e): return 1\n"})
	up, err := e.C.Upload(ctx, "f", bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s3.Get(ctx, codestore.Key(e.NS, "f", up.CodeSHA256))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, z) {
		t.Errorf("S3 holds %d bytes, uploaded %d", len(got), len(z))
	}
	if err := e.C.DeleteFunction(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s3.Exists(ctx, codestore.Key(e.NS, "f", up.CodeSHA256)); ok {
		t.Error("deleting the function left its code in S3")
	}
}
