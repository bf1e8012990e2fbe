package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/objects"
)

var zipTypes = map[string]bool{"application/zip": true, "application/x-zip-compressed": true, "application/octet-stream": true}

// upload takes a zip of the function's code. Order matters: the size limit is enforced while the
// body is spooled to a temporary file (413 before anything is stored), the archive is checked with
// the same rules the builder applies (400 with the reason), and only then is it stored under its
// sha256 and recorded on the function. The same zip twice changes nothing. A code store that does
// not answer is 503 not_ready within seconds (codestore.DefaultTimeout), with nothing recorded.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	ns, name := pathVar(r, "ns"), pathVar(r, "name")
	ctx := r.Context()
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(10 * time.Minute))
	if err := apiv1.ValidName("function", name); err != nil {
		drain(r)
		writeError(w, r, err)
		return
	}
	fn, err := s.b.Functions.Get(ctx, ns, name)
	if err != nil {
		drain(r)
		writeError(w, r, notFound("function", name, err))
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); !zipTypes[mt] {
		drain(r)
		writeError(w, r, invalid("Content-Type %q: send the archive as application/zip", r.Header.Get("Content-Type")))
		return
	}
	if r.ContentLength > s.o.uploadLimit {
		writeError(w, r, apiv1.Errorf(apiv1.CodePayloadTooLarge, "the archive is %d bytes; the limit is %d", r.ContentLength, s.o.uploadLimit))
		return
	}
	release, wait := s.uploads.admit(ns)
	if release == nil {
		// Not read: the answer goes out at once and the connection closes.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
		writeError(w, r, apiv1.Errorf(apiv1.CodeThrottled, "too many uploads to namespace %s (at most %d at once, %g a minute on average); retry after %s",
			ns, UploadsInFlight, s.o.uploadRate, wait.Round(time.Second)))
		return
	}
	defer release()

	f, err := os.CreateTemp(s.o.tempDir, "sless-upload-*.zip")
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(f, h), http.MaxBytesReader(w, r.Body, s.o.uploadLimit))
	if err != nil {
		if _, ok := err.(*http.MaxBytesError); ok {
			writeError(w, r, apiv1.Errorf(apiv1.CodePayloadTooLarge, "the archive exceeds the limit of %d bytes", s.o.uploadLimit))
			return
		}
		writeError(w, r, invalid("reading the archive: %v", err))
		return
	}
	sum := hex.EncodeToString(h.Sum(nil))
	var check []layers.Option
	if fn.Spec.Runtime == apiv1.RuntimeProvided {
		// The process is the upload's own bootstrap: without it (or not executable) nothing
		// could start, so it is refused now rather than failing the build.
		check = append(check, layers.WithExecutable(apiv1.ProvidedBootstrap))
	}
	if err := layers.ValidateZip(f, size, check...); err != nil {
		writeError(w, r, err)
		return
	}

	key := codestore.Key(ns, name, sum)
	exists, err := s.b.Code.Exists(ctx, key)
	if err != nil {
		storeFailed(w, r, fmt.Errorf("checking the code store: %w", err))
		return
	}
	if !exists {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			writeError(w, r, err)
			return
		}
		if err := s.b.Code.Put(ctx, key, f, size); err != nil {
			storeFailed(w, r, fmt.Errorf("storing the archive: %w", err))
			return
		}
	}
	// The same code again changes nothing (no new generation, no build).
	out, err := s.b.Functions.Update(ctx, ns, name, func(fn *objects.FunctionSpec) error { fn.CodeSHA256 = sum; return nil })
	if err != nil {
		writeError(w, r, notFound("function", name, err))
		return
	}
	s.metrics.uploadBytes.Observe(float64(size))
	writeJSON(w, http.StatusAccepted, apiv1.UploadResponse{CodeSHA256: sum, Phase: objects.FunctionView(s.o.publicURL, ns, out).Status.Phase})
}

// storeFailed answers an upload the code store did not take. A store that does not answer
// (codestore.ErrUnavailable) is 503 not_ready with Retry-After: nothing was recorded (the function
// keeps its code and the version it serves), so the same upload can simply be sent again.
func storeFailed(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, codestore.ErrUnavailable) {
		writeError(w, r, err)
		return
	}
	logCause(w, err)
	writeError(w, r, &apiv1.Error{Status: http.StatusServiceUnavailable, Code: apiv1.CodeNotReady, RetryAfter: unavailableRetry,
		Message: "the code store is unavailable: the archive was not stored and the function is unchanged; retry the upload"})
}
