package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// testUploadThrottle: one namespace's uploads are rate-limited (429 throttled, Retry-After, the
// body not read) and at most api.UploadsInFlight are received at once; another namespace is not
// affected; the client waits and sends again.
func testUploadThrottle(t *testing.T, bk Backend) {
	e := NewEnv(t, bk, api.WithUploadRate(20, 2)) // one every 3 s after a burst of two
	e.Ensure()
	e.Function("f")
	ctx := context.Background()
	z := ZipOf(t, map[string]string{"handler.py": "def handle(e):\n    return 1\n"})
	path := "/v1/namespaces/" + e.NS + "/functions/f/upload"

	for i := range 2 {
		if code, ecode, b := e.Raw("POST", path, e.Token, "application/zip", z); code != http.StatusAccepted {
			t.Fatalf("upload %d: %d %s %s", i, code, ecode, b)
		}
	}
	req, _ := http.NewRequest("POST", e.URL+path, bytes.NewReader(z))
	req.Header.Set("Authorization", "Bearer "+e.Token)
	req.Header.Set("Content-Type", "application/zip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte(apiv1.CodeThrottled)) || secs < 1 || secs > 3 {
		t.Fatalf("third upload in a burst of two: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}

	// Another tenant uploads at once.
	other := e.Tenant()
	other.Ensure()
	other.Function("f")
	if _, err := other.C.Upload(ctx, "f", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatalf("another tenant throttled: %v", err)
	}

	// The client waits as told and sends the archive again.
	start := time.Now()
	if _, err := e.C.Upload(ctx, "f", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatalf("client upload after throttling: %v", err)
	}
	waited := time.Since(start)
	t.Logf("the client's upload went through %v after being throttled", waited.Round(time.Millisecond))
	if waited < 500*time.Millisecond {
		t.Errorf("the client's upload went through at once (%v): it was not throttled, so its retry is untested", waited)
	}

	// Uploads being received count against the namespace: slow ones hold it. They are admitted
	// once their spool files exist.
	spool := t.TempDir()
	e2 := NewEnv(t, bk, api.WithUploadRate(0, 0), api.WithTempDir(spool))
	e2.Ensure()
	e2.Function("f")
	var writers []*io.PipeWriter
	done := make(chan error, api.UploadsInFlight)
	for range api.UploadsInFlight {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		// On failure, the server's Close would wait for these forever.
		t.Cleanup(func() { pw.CloseWithError(errors.New("test over")) })
		go func() {
			_, err := e2.C.Upload(ctx, "f", pr, int64(len(z)))
			done <- err
		}()
		pw.Write(z[:10])
	}
	if !waitFor(10*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(spool, "sless-upload-*"))
		return len(m) == api.UploadsInFlight
	}) {
		t.Fatal("the slow uploads were not admitted")
	}
	// Not a Seeker: the client does not wait and retry.
	_, err = e2.C.Upload(ctx, "f", io.NopCloser(bytes.NewReader(z)), int64(len(z)))
	var ae *apiv1.Error
	if !errors.As(err, &ae) || ae.Code != apiv1.CodeThrottled {
		t.Fatalf("an upload beyond %d in flight: %v", api.UploadsInFlight, err)
	}
	for _, pw := range writers {
		pw.Write(z[10:])
		pw.Close()
	}
	for range api.UploadsInFlight {
		if err := <-done; err != nil {
			t.Fatalf("slow upload: %v", err)
		}
	}
	if _, err := e2.C.Upload(ctx, "f", bytes.NewReader(z), int64(len(z))); err != nil {
		t.Fatalf("after the slow uploads: %v", err)
	}
}

// testRebuildThrottle: a PUT that changes a build input of stored code (the entrypoint, the
// runtime) rebuilds it, so it takes from the namespace's upload rate like an upload: 429 throttled
// with Retry-After beyond, the function unchanged; the client waits and sends it again. A PUT that
// changes anything else, or one of a function without code, is not counted.
func testRebuildThrottle(t *testing.T, bk Backend) {
	e := NewEnv(t, bk, api.WithUploadRate(20, 2)) // one every 3 s after a burst of two
	e.Ensure()
	e.Function("f")
	ctx := context.Background()
	put := func(f apiv1.Function) (*http.Response, string) {
		t.Helper()
		b, _ := json.Marshal(f)
		req, _ := http.NewRequest("PUT", e.URL+"/v1/namespaces/"+e.NS+"/functions/f", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+e.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	ok := func(what string, f apiv1.Function) {
		t.Helper()
		if resp, b := put(f); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
		}
	}
	throttled := func(what string, f apiv1.Function) {
		t.Helper()
		resp, b := put(f)
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(b, apiv1.CodeThrottled) || secs < 1 || secs > 3 {
			t.Fatalf("%s: %d Retry-After %q %s, want 429 throttled", what, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	py := func(entrypoint string, memoryMB int) apiv1.Function {
		return apiv1.Function{Name: "f", Runtime: apiv1.RuntimePython311, Entrypoint: entrypoint, MemoryMB: memoryMB}
	}

	for _, ep := range []string{"a.handle", "b.handle", "c.handle"} {
		ok("a new entrypoint without code (nothing to build)", py(ep, 0))
	}
	z := ZipOf(t, map[string]string{"c.py": "def handle(e):\n    return 1\n"})
	if _, err := e.C.Upload(ctx, "f", bytes.NewReader(z), int64(len(z))); err != nil { // the burst's first
		t.Fatal(err)
	}
	for _, mb := range []int{192, 256, 320} {
		ok("a new memory_mb (no rebuild)", py("c.handle", mb))
	}
	ok("a new entrypoint of stored code", py("d.handle", 320)) // the burst's second
	throttled("a new entrypoint beyond the burst", py("e.handle", 512))
	if f, err := e.C.GetFunction(ctx, "f"); err != nil || f.Entrypoint != "d.handle" || f.MemoryMB != 320 {
		t.Fatalf("a refused PUT changed the function: %+v %v", f, err)
	}
	// They share one bucket: an upload is refused now too.
	z2 := ZipOf(t, map[string]string{"d.py": "def handle(e):\n    return 2\n"})
	if code, ecode, b := e.Raw("POST", "/v1/namespaces/"+e.NS+"/functions/f/upload", e.Token, "application/zip", z2); code != http.StatusTooManyRequests || ecode != apiv1.CodeThrottled {
		t.Fatalf("an upload after the rebuilds took the burst: %d %s %s", code, ecode, b)
	}

	// The client waits as told and sends the PUT again.
	start := time.Now()
	f, err := e.C.UpdateFunction(ctx, apiv1.Function{Name: "f", Runtime: apiv1.RuntimePython311, Entrypoint: "e.handle"})
	if err != nil || f.Entrypoint != "e.handle" {
		t.Fatalf("the client's PUT after throttling: %+v %v", f, err)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Errorf("the client's PUT went through at once (%v): it was not throttled, so its retry is untested", waited)
	}
	// A new runtime rebuilds as well.
	throttled("a new runtime beyond the rate", apiv1.Function{Name: "f", Runtime: apiv1.RuntimeNodejs20, Entrypoint: "e.handle"})
	if f, err := e.C.GetFunction(ctx, "f"); err != nil || f.Runtime != apiv1.RuntimePython311 {
		t.Fatalf("a refused PUT changed the runtime: %+v %v", f, err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
