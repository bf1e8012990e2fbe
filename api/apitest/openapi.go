package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/content"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"github.com/sless-dev/sless/api"
)

// Every Env checks what its server is sent and answers against the API's OpenAPI document
// (api/openapi.json, api.OpenAPI) with pb33f/libopenapi-validator, so the document cannot drift
// from the handlers: a mismatch fails the test that made the request, with the validator's
// message. The check sits around the server's handler, so the typed client, raw requests and /fn/
// calls are all seen, on every backend the suite runs on. What it requires of each exchange:
//
//   - A request the document allows gets an answer the document lists for its operation (status,
//     headers, body against the schema).
//   - A request the document forbids (a bad name, a missing token, a field it does not list) is
//     refused with a 4xx the operation lists: the document may be stricter than the server only
//     where the server refuses too.
//   - A path the document does not list is answered 404 not_found, a method a listed path does not
//     have 405 method_not_allowed, both with the error envelope (the router's own answers: they
//     carry no X-Request-Id, so only the status and the body are checked).
//   - Under /fn/, the function's own answers (the platform reached it: it sent a response) are
//     anyone's: only the request is checked. The platform's own answers (404, 429, 502, 503, 504,
//     413, …) are checked like any other.
//
// Not checked: methods OpenAPI 3.1 cannot name (/fn/ passes them on), answers to callers that went
// away (nobody reads them), requests to a function's own host (WithFunctionDomain) the function
// answered, and benchmarks (the check would be what they measure).

// OpenAPICounts counts what the check saw, per backend (OpenAPIStats).
type OpenAPICounts struct {
	// Requests to listed operations the document allows, and those it forbids that were refused
	// with a 4xx as they must be.
	Valid, Refused atomic.Int64
	// Answers of the API's own checked against the document: those of listed operations, and the
	// 404/405 envelopes of paths and methods it does not list.
	Answers, Unlisted atomic.Int64
	// Function answers /fn/ passed through (their requests are checked and counted above), and
	// exchanges the document cannot describe.
	FunctionAnswers, Skipped atomic.Int64
}

func (c *OpenAPICounts) String() string {
	return fmt.Sprintf("%d requests checked (%d valid, %d forbidden and refused, %d to unlisted paths or methods); "+
		"%d answers checked (%d of listed operations, %d 404/405 envelopes); %d function answers passed through; %d not describable",
		c.Valid.Load()+c.Refused.Load()+c.Unlisted.Load(), c.Valid.Load(), c.Refused.Load(), c.Unlisted.Load(),
		c.Answers.Load()+c.Unlisted.Load(), c.Answers.Load(), c.Unlisted.Load(), c.FunctionAnswers.Load(), c.Skipped.Load())
}

// openAPISnapshot is a copy of the counts at one moment.
type openAPISnapshot [6]int64

func (c *OpenAPICounts) snapshot() openAPISnapshot {
	return openAPISnapshot{c.Valid.Load(), c.Refused.Load(), c.Answers.Load(), c.Unlisted.Load(), c.FunctionAnswers.Load(), c.Skipped.Load()}
}

// since is what was counted after then.
func (c *OpenAPICounts) since(then openAPISnapshot) *OpenAPICounts {
	now, d := c.snapshot(), &OpenAPICounts{}
	for i, f := range []*atomic.Int64{&d.Valid, &d.Refused, &d.Answers, &d.Unlisted, &d.FunctionAnswers, &d.Skipped} {
		f.Store(now[i] - then[i])
	}
	return d
}

var openAPIStats sync.Map // backend name → *OpenAPICounts

// OpenAPIStats is what the check has seen of backend name's servers in this test binary so far.
func OpenAPIStats(name string) *OpenAPICounts {
	c, _ := openAPIStats.LoadOrStore(name, &OpenAPICounts{})
	return c.(*OpenAPICounts)
}

// openAPIDoc is the document, parsed once per test binary.
type openAPIDoc struct {
	v       validator.Validator
	schemas schema_validation.SchemaValidator
	// unlisted are the envelopes of unlisted paths (404) and methods (405).
	unlisted map[int]*base.Schema
}

var loadOpenAPI = sync.OnceValues(func() (*openAPIDoc, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("parsing api/openapi.json: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("building the model of api/openapi.json: %w", err)
	}
	opts := []config.Option{config.WithFormatAssertions()}
	schemas := schema_validation.NewSchemaValidator(opts...)
	d := &openAPIDoc{
		v:        validator.NewValidatorFromV3Model(&m.Model, append(opts, config.WithBodyDecoder(ndjsonType, ndjsonDecoder(schemas)))...),
		schemas:  schemas,
		unlisted: map[int]*base.Schema{},
	}
	for status, name := range map[int]string{http.StatusNotFound: "NotFound", http.StatusMethodNotAllowed: "MethodNotAllowed"} {
		r, ok := m.Model.Components.Responses.Get(name)
		if !ok {
			return nil, fmt.Errorf("api/openapi.json has no components.responses.%s", name)
		}
		mt, ok := r.Content.Get("application/json")
		if !ok || mt.Schema == nil {
			return nil, fmt.Errorf("api/openapi.json: components.responses.%s has no application/json schema", name)
		}
		d.unlisted[status] = mt.Schema.Schema()
	}
	return d, nil
})

// ndjsonType is the media type of the streamed answers (…/logs, …/events).
const ndjsonType = "application/x-ndjson"

// ndjsonDecoder checks an NDJSON body line by line: OpenAPI 3.1 has no schema for a sequence of
// documents, so the document gives the schema of one line and each line is checked against it
// here. The validator would otherwise read "x-ndjson" as JSON and fail on the second line. It
// returns nil (nothing left to check): an empty body, no lines yet, is a valid stream.
func ndjsonDecoder(schemas schema_validation.SchemaValidator) content.Decoder {
	return content.DecoderFunc(func(in *content.DecodeInput) (any, error) {
		b, err := io.ReadAll(in.Body)
		if err != nil {
			return nil, err
		}
		var bad []string
		for i, line := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if in.Schema == nil {
				continue
			}
			if ok, errs := schemas.ValidateSchemaBytes(in.Schema, line); !ok {
				bad = append(bad, fmt.Sprintf("line %d: %s\n%s", i+1, clip(line), describe(errs)))
			}
		}
		if len(bad) > 0 {
			return nil, fmt.Errorf("%d NDJSON lines do not match the schema of one line:\n%s", len(bad), strings.Join(bad, "\n"))
		}
		return nil, nil
	})
}

// maxCaptured bounds what the check keeps of one body; a longer one is not checked.
const maxCaptured = 16 << 20

// checkOpenAPI wraps next so that every exchange is checked as the package comment above says;
// report gets each mismatch (a test's Errorf) and counts what was seen.
func checkOpenAPI(report func(format string, args ...any), counts *OpenAPICounts, next http.Handler) http.Handler {
	doc, err := loadOpenAPI()
	if err != nil {
		report("openapi: %v", err)
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, reached := traceFunctionAnswer(r.Context())
		in := &capturedBody{r: r.Body}
		out := &capturedResponse{ResponseWriter: w}
		r2 := r.WithContext(ctx)
		r2.Body = in
		next.ServeHTTP(out, r2)
		if !in.eof && !in.tooLong && r.Body != http.NoBody {
			// What the handler did not read (a refusal): the rest, for the request's check. The
			// server sets its own deadlines again for the connection's next request.
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(5 * time.Second))
			in.readRest()
		}
		doc.check(report, counts, r, in, out, reached())
	})
}

func (d *openAPIDoc) check(report func(string, ...any), counts *OpenAPICounts, r *http.Request, in *capturedBody, out *capturedResponse, reached bool) {
	status, header := out.status, out.header
	if status == 0 { // nothing written: net/http answers 200 with no body
		status, header = http.StatusOK, out.ResponseWriter.Header().Clone()
	}
	if !describable[r.Method] || r.Context().Err() != nil || status == 499 || in.tooLong || out.tooLong {
		counts.Skipped.Add(1)
		return
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(in.buf.Bytes()))
	req.ContentLength = int64(in.buf.Len())
	fn := fnTemplate(req.URL)
	what := fmt.Sprintf("%s %s → %d", r.Method, r.URL.RequestURI(), status)

	if reached {
		// The function's own answer: anything goes. Only a request under /fn/ is the API's.
		counts.FunctionAnswers.Add(1)
		if fn {
			if ok, errs := d.v.ValidateHttpRequestSync(req); !ok {
				report("openapi: %s: /fn/ passed on a request the document forbids:\n%s", what, describe(errs))
				return
			}
			counts.Valid.Add(1)
		}
		return
	}

	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(out.buf.Bytes())), Request: req}
	reqOK, reqErrs := d.v.ValidateHttpRequestSync(req)
	if unlisted := unlistedStatus(reqErrs); unlisted != 0 {
		counts.Unlisted.Add(1)
		if status != unlisted {
			report("openapi: %s: the document does not list this %s, so the answer must be %d:\n%s", what,
				map[int]string{404: "path", 405: "method"}[unlisted], unlisted, describe(reqErrs))
			return
		}
		if ok, errs := d.schemas.ValidateSchemaBytes(d.unlisted[unlisted], out.buf.Bytes()); !ok {
			report("openapi: %s: not the %d envelope:\n%s\nbody: %s", what, unlisted, describe(errs), clip(out.buf.Bytes()))
		}
		return
	}
	respOK, respErrs := d.v.ValidateHttpResponse(req, resp)
	switch {
	case !reqOK && (status < 400 || status > 499):
		report("openapi: %s: the document forbids this request, but the server did not refuse it:\n%s\nrequest body: %s",
			what, describe(reqErrs), clip(in.buf.Bytes()))
	case !reqOK:
		counts.Refused.Add(1)
	default:
		counts.Valid.Add(1)
	}
	if !respOK {
		report("openapi: %s: the answer does not match the document:\n%s\nbody: %s", what, describe(respErrs), clip(out.buf.Bytes()))
		return
	}
	counts.Answers.Add(1)
}

// traceFunctionAnswer tells whether a function answered a request /fn/ passed on with ctx: the
// proxy derives its request's context from the incoming one, so the transport reports to this
// trace. A backend's own calls with the same context (the Kubernetes store's to its API server)
// report too: the proxy's request is told apart by the X-Forwarded-Host it alone sends, and each
// new request (GetConn) starts over.
func traceFunctionAnswer(ctx context.Context) (context.Context, func() bool) {
	var mu sync.Mutex
	proxied, answered := false, false
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { mu.Lock(); proxied = false; mu.Unlock() },
		WroteHeaderField: func(key string, _ []string) {
			if key == "X-Forwarded-Host" {
				mu.Lock()
				proxied = true
				mu.Unlock()
			}
		},
		GotFirstResponseByte: func() {
			mu.Lock()
			answered = answered || proxied
			mu.Unlock()
		},
	}), func() bool { mu.Lock(); defer mu.Unlock(); return answered }
}

// describable are the methods an OpenAPI 3.1 path item can name.
var describable = map[string]bool{http.MethodGet: true, http.MethodPut: true, http.MethodPost: true, http.MethodDelete: true,
	http.MethodOptions: true, http.MethodHead: true, http.MethodPatch: true, http.MethodTrace: true}

// fnTemplate maps /fn/{ns}/{name}/{path…} onto the document's /fn/{ns}/{name}/{path}: OpenAPI path
// parameters are one segment, so the rest's slashes are escaped into it ("a/b" → "a%2Fb"), and an
// empty rest ("/fn/ns/f/") is the root, as /fn/ serves it. It reports whether u is under /fn/.
func fnTemplate(u *url.URL) bool {
	p, ok := strings.CutPrefix(u.EscapedPath(), "/fn/")
	if !ok {
		return false
	}
	parts := strings.SplitN(p, "/", 3)
	if len(parts) < 3 {
		return true
	}
	rest, err := url.PathUnescape(parts[2])
	if err != nil {
		return true
	}
	base := "/fn/" + parts[0] + "/" + parts[1]
	if rest == "" {
		u.RawPath = ""
		u.Path, _ = url.PathUnescape(base)
		return true
	}
	u.RawPath = base + "/" + url.PathEscape(rest)
	u.Path, _ = url.PathUnescape(u.RawPath)
	return true
}

// unlistedStatus is 404 when errs say the document lists no such path, 405 when it lists the path
// but not the method, else 0.
func unlistedStatus(errs []*verrors.ValidationError) int {
	for _, e := range errs {
		switch {
		case e.ValidationType == helpers.PathValidation && e.ValidationSubType == helpers.ValidationMissing:
			return http.StatusNotFound
		case e.ValidationSubType == helpers.ValidationMissingOperation:
			return http.StatusMethodNotAllowed
		}
	}
	return 0
}

// describe is the validator's messages, one a line, with each schema failure's reason and place.
func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s: %s", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s", f.Reason)
			if f.FieldPath != "" {
				fmt.Fprintf(&b, " (at %s)", f.FieldPath)
			}
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

func clip(b []byte) string {
	if len(b) > 512 {
		return string(b[:512]) + "…"
	}
	return string(b)
}

// capturedBody keeps what the handler reads of a request body.
type capturedBody struct {
	r            io.ReadCloser
	buf          bytes.Buffer
	eof, tooLong bool
}

func (c *capturedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.keep(p[:n])
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

func (c *capturedBody) Close() error { return c.r.Close() }

func (c *capturedBody) keep(p []byte) {
	if c.buf.Len()+len(p) > maxCaptured {
		c.tooLong = true
		return
	}
	c.buf.Write(p)
}

// readRest reads what is left of the body (bounded), ignoring errors: the server may have closed it.
func (c *capturedBody) readRest() {
	b, _ := io.ReadAll(io.LimitReader(c.r, maxCaptured+1-int64(c.buf.Len())))
	c.keep(b)
}

// capturedResponse passes an answer through as it is written (flushes included) and keeps its
// status, headers and body.
type capturedResponse struct {
	http.ResponseWriter
	status  int
	header  http.Header
	buf     bytes.Buffer
	tooLong bool
}

func (c *capturedResponse) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status, c.header = code, c.ResponseWriter.Header().Clone()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *capturedResponse) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status, c.header = http.StatusOK, c.ResponseWriter.Header().Clone()
	}
	n, err := c.ResponseWriter.Write(p)
	if c.buf.Len()+n > maxCaptured {
		c.tooLong = true
	} else {
		c.buf.Write(p[:n])
	}
	return n, err
}

func (c *capturedResponse) Flush() { http.NewResponseController(c.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the server's writer (deadlines, hijacking).
func (c *capturedResponse) Unwrap() http.ResponseWriter { return c.ResponseWriter }
