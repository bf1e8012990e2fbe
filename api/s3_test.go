package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apitest"
	"github.com/sless-dev/sless/api/apiv1"
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

// S3 down while a function serves: an upload is answered 503 not_ready (the envelope, Retry-After)
// within seconds, whether the server refuses connections (stopped) or accepts them and answers
// nothing (hung); nothing is written (code_sha256 unchanged, no object under the new sha256) and
// the version that serves goes on serving. Once S3 is back the same upload succeeds.
func TestUploadWhileS3IsDown(t *testing.T) {
	m := testenv.MinIOProcess(t)
	ctx := context.Background()
	// The operator's settings: the default timeout.
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
	v1 := apitest.ZipOf(t, map[string]string{"handler.py": "def handle(e): return 1\n"})
	up1, err := e.C.Upload(ctx, "f", bytes.NewReader(v1), int64(len(v1)))
	if err != nil {
		t.Fatal(err)
	}
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "version 1") }))
	t.Cleanup(fn.Close)
	e.Ready("f", fn.URL)
	serves := func(t *testing.T) {
		t.Helper()
		resp, err := http.Get(e.URL + "/fn/" + e.NS + "/f")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "version 1" {
			t.Errorf("/fn/ answered %d %q, want the old version", resp.StatusCode, b)
		}
	}
	serves(t)

	v2 := apitest.ZipOf(t, map[string]string{"handler.py": "def handle(e): return 2\n"})
	sum2 := fmt.Sprintf("%x", sha256.Sum256(v2))
	upload := func() (*http.Response, []byte, time.Duration) {
		req, _ := http.NewRequest("POST", e.URL+"/v1/namespaces/"+e.NS+"/functions/f/upload", bytes.NewReader(v2))
		req.Header.Set("Authorization", "Bearer "+e.Token)
		req.Header.Set("Content-Type", "application/zip")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b, time.Since(start)
	}
	for _, outage := range []struct {
		name     string
		down, up func() error
		within   time.Duration
	}{
		{"stopped", func() error { m.Stop(); return nil }, m.Start, 2 * time.Second},
		{"hung", m.Pause, m.Resume, codestore.DefaultTimeout + 2*time.Second},
	} {
		t.Run(outage.name, func(t *testing.T) {
			if err := outage.down(); err != nil {
				t.Fatal(err)
			}
			resp, body, took := upload()
			t.Logf("upload while S3 is %s: %d %s after %v", outage.name, resp.StatusCode, bytes.TrimSpace(body), took.Round(time.Millisecond))
			var env apiv1.ErrorBody
			json.Unmarshal(body, &env)
			if resp.StatusCode != 503 || env.Error.Code != apiv1.CodeNotReady || !strings.Contains(env.Error.Message, "code store") {
				t.Errorf("answered %d %s, want 503 not_ready naming the code store", resp.StatusCode, body)
			}
			if resp.Header.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			if strings.Contains(string(body), m.Endpoint[len("http://"):]) || strings.Contains(string(body), "uploads") {
				t.Errorf("the answer shows the store's address or bucket: %s", body)
			}
			if took > outage.within {
				t.Errorf("answered after %v, want within %v", took, outage.within)
			}
			if f, err := e.C.GetFunction(ctx, "f"); err != nil || f.Status.CodeSHA256 != up1.CodeSHA256 {
				t.Errorf("the function's code changed: %v %+v", err, f)
			}
			serves(t)
			if err := outage.up(); err != nil {
				t.Fatal(err)
			}
			if ok, err := s3.Exists(ctx, codestore.Key(e.NS, "f", sum2)); ok || err != nil {
				t.Errorf("the refused upload left an object (%v, %v)", ok, err)
			}
		})
	}
	t.Run("the same upload after S3 returns", func(t *testing.T) {
		up, err := e.C.Upload(ctx, "f", bytes.NewReader(v2), int64(len(v2)))
		if err != nil {
			t.Fatal(err)
		}
		if f, _ := e.C.GetFunction(ctx, "f"); up.CodeSHA256 != sum2 || f.Status.CodeSHA256 != sum2 {
			t.Errorf("uploaded %s, function has %s, want %s", up.CodeSHA256, f.Status.CodeSHA256, sum2)
		}
		rc, err := s3.Get(ctx, codestore.Key(e.NS, "f", sum2))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, v2) {
			t.Errorf("S3 holds %d bytes, uploaded %d", len(got), len(v2))
		}
	})
}
