package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// Client talks to one sless API as one user, in that user's namespace.
type Client struct {
	base      *url.URL
	token     string
	namespace string
	hc        *http.Client
	userAgent string
	warnings  WarningHandler
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. The default has a 10-minute timeout (uploads can be large).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithNamespace sets the namespace instead of deriving it from the token's subject.
// The default is apiv1.NamespaceFor(sub).
func WithNamespace(ns string) Option { return func(c *Client) { c.namespace = ns } }

// WithUserAgent sets the User-Agent header. The default is "sless-client".
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WarningHandler is told the text of each warning an answer carries (its `Warning: 299` headers,
// apiv1.ParseWarnings): a request the API admitted with a warning, such as a function on a
// deprecated runtime. It is called before the method that sent the request returns.
type WarningHandler func(text string)

// WithWarningHandler sets what is told the warnings of every answer whose request's context has
// no handler of its own (ContextWithWarningHandler). The default drops them.
func WithWarningHandler(h WarningHandler) Option { return func(c *Client) { c.warnings = h } }

type warningsKey struct{}

// ContextWithWarningHandler returns ctx whose requests tell their answers' warnings to h instead
// of the client's handler (WithWarningHandler): a caller sharing one client (the Terraform
// provider's resources) collects the warnings of its own calls.
func ContextWithWarningHandler(ctx context.Context, h WarningHandler) context.Context {
	return context.WithValue(ctx, warningsKey{}, h)
}

// WarningHandlerFromContext is ctx's handler (ContextWithWarningHandler), or nil.
func WarningHandlerFromContext(ctx context.Context) WarningHandler {
	h, _ := ctx.Value(warningsKey{}).(WarningHandler)
	return h
}

// warn tells the warnings of resp to ctx's handler, else the client's.
func (c *Client) warn(ctx context.Context, resp *http.Response) {
	texts := apiv1.ParseWarnings(resp.Header.Values("Warning"))
	if len(texts) == 0 {
		return
	}
	h := WarningHandlerFromContext(ctx)
	if h == nil {
		h = c.warnings
	}
	if h == nil {
		return
	}
	for _, t := range texts {
		h(t)
	}
}

// New makes a client for endpoint (e.g. "http://127.0.0.1:8080") authenticating with token.
func New(endpoint, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q must be an http:// or https:// URL", endpoint)
	}
	c := &Client{base: u, token: token, hc: &http.Client{Timeout: 10 * time.Minute}, userAgent: "sless-client"}
	for _, o := range opts {
		o(c)
	}
	if c.namespace == "" {
		sub, err := SubjectOf(token)
		if err != nil {
			return nil, err
		}
		c.namespace = apiv1.NamespaceFor(sub)
	}
	return c, nil
}

// Namespace is the namespace the client works in.
func (c *Client) Namespace() string { return c.namespace }

// Endpoint is the API's base URL.
func (c *Client) Endpoint() string { return c.base.String() }

// FunctionURL is the public /fn/ URL of a function.
func (c *Client) FunctionURL(name string) string {
	return c.base.String() + "/fn/" + c.namespace + "/" + name
}

// SubjectOf reads the "sub" claim of a JWT without verifying it (the server verifies); it is only
// used to find the caller's namespace.
func SubjectOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("token is not a JWT (want header.payload.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("token payload is not base64url: %w", err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Sub == "" {
		return "", errors.New("token has no \"sub\" claim")
	}
	return claims.Sub, nil
}

// IsNotFound reports whether err is the API's not_found.
func IsNotFound(err error) bool { return hasCode(err, apiv1.CodeNotFound) }

// IsAlreadyExists reports whether err is the API's already_exists.
func IsAlreadyExists(err error) bool { return hasCode(err, apiv1.CodeAlreadyExists) }

func hasCode(err error, code string) bool {
	var e *apiv1.Error
	return errors.As(err, &e) && e.Code == code
}

func (c *Client) nsPath(format string, args ...any) string {
	escaped := make([]any, len(args))
	for i, a := range args {
		escaped[i] = url.PathEscape(fmt.Sprint(a))
	}
	return "/v1/namespaces/" + url.PathEscape(c.namespace) + fmt.Sprintf(format, escaped...)
}

// do sends a request and decodes a JSON answer into out (unless nil). A non-2xx answer is returned
// as *apiv1.Error.
func (c *Client) do(ctx context.Context, method, path, ctype string, body io.Reader, size int64, out any) error {
	u := *c.base
	path, u.RawQuery, _ = strings.Cut(path, "?") // nsPath escapes a "?" in names
	u.Path = c.base.Path + path
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if size >= 0 && body != nil {
		req.ContentLength = size
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return parseError(resp)
	}
	c.warn(ctx, resp)
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// parseError turns an error response into *apiv1.Error, keeping some body if it is not an envelope.
func parseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var env apiv1.ErrorBody
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		ae := &apiv1.Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			ae.RetryAfter = time.Duration(secs) * time.Second
		}
		return ae
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &apiv1.Error{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Message: msg}
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	if in == nil {
		return c.do(ctx, method, path, "", nil, -1, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, "application/json", bytes.NewReader(b), int64(len(b)), out)
}

// EnsureNamespace creates the caller's namespace if needed.
func (c *Client) EnsureNamespace(ctx context.Context) error {
	return c.doJSON(ctx, http.MethodPost, c.nsPath("/ensure"), nil, nil)
}

// DeleteNamespace removes the caller's namespace; it fails with conflict while functions remain.
func (c *Client) DeleteNamespace(ctx context.Context) error {
	return c.doJSON(ctx, http.MethodDelete, c.nsPath(""), nil, nil)
}

// Runtimes lists the install's runtimes (GET /v1/runtimes): each one's status (supported,
// deprecated, blocked), its replacement and the image by digest functions are built on there.
func (c *Client) Runtimes(ctx context.Context) ([]apiv1.Runtime, error) {
	var l apiv1.RuntimeList
	err := c.doJSON(ctx, http.MethodGet, "/v1/runtimes", nil, &l)
	return l.Items, err
}

// ListFunctions lists the namespace's functions.
func (c *Client) ListFunctions(ctx context.Context) ([]apiv1.Function, error) {
	var l apiv1.List[apiv1.Function]
	err := c.doJSON(ctx, http.MethodGet, c.nsPath("/functions"), nil, &l)
	return l.Items, err
}

// GetFunction reads one function.
func (c *Client) GetFunction(ctx context.Context, name string) (*apiv1.Function, error) {
	var f apiv1.Function
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/functions/%s", name), nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// CreateFunction creates a function (without code; Upload sends the code).
func (c *Client) CreateFunction(ctx context.Context, f apiv1.Function) (*apiv1.Function, error) {
	var out apiv1.Function
	if err := c.doJSON(ctx, http.MethodPost, c.nsPath("/functions"), f, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateFunction replaces a function's spec. A new entrypoint or runtime rebuilds the function
// and counts against the namespace's upload rate: when the API throttles it, UpdateFunction waits
// as Upload does and sends it again.
func (c *Client) UpdateFunction(ctx context.Context, f apiv1.Function) (*apiv1.Function, error) {
	for attempt := 1; ; attempt++ {
		var out apiv1.Function
		err := c.doJSON(ctx, http.MethodPut, c.nsPath("/functions/%s", f.Name), f, &out)
		if err == nil {
			return &out, nil
		}
		if attempt == 100 || !waitThrottled(ctx, err) {
			return nil, err
		}
	}
}

// waitThrottled waits as a 429 throttled err tells (Retry-After, at least a second, at most a
// minute) and reports true; false at once for any other error, or when ctx ends first.
func waitThrottled(ctx context.Context, err error) bool {
	var ae *apiv1.Error
	if !errors.As(err, &ae) || ae.Code != apiv1.CodeThrottled {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(min(max(ae.RetryAfter, time.Second), time.Minute)):
		return true
	}
}

// DeleteFunction deletes a function, its code and its image.
func (c *Client) DeleteFunction(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, c.nsPath("/functions/%s", name), nil, nil)
}

// Upload sends a zip of the function's code (size bytes; -1 if unknown). When the API throttles
// the namespace's uploads and zip is an io.Seeker, it waits as told (Retry-After, at most a minute
// each time) and sends it again, until ctx ends (at most 100 times). zip is not closed.
func (c *Client) Upload(ctx context.Context, name string, zip io.Reader, size int64) (*apiv1.UploadResponse, error) {
	for attempt := 1; ; attempt++ {
		var out apiv1.UploadResponse
		// The transport closes a request's body; an *os.File closed could not be sent again.
		err := c.do(ctx, http.MethodPost, c.nsPath("/functions/%s/upload", name), "application/zip", io.NopCloser(zip), size, &out)
		if err == nil {
			return &out, nil
		}
		seeker, seekable := zip.(io.Seeker)
		if !seekable || attempt == 100 {
			return nil, err
		}
		if _, serr := seeker.Seek(0, io.SeekStart); serr != nil {
			return nil, err
		}
		if !waitThrottled(ctx, err) {
			return nil, err
		}
	}
}

// Invocations lists a function's recent invocations, newest first (the server's default page:
// the newest 100).
func (c *Client) Invocations(ctx context.Context, name string) ([]apiv1.Invocation, error) {
	return c.ListInvocations(ctx, name, 0, time.Time{})
}

// ListInvocations lists up to limit of a function's invocations (1–1000; 0 is the server's
// default, 100), newest first, only those strictly older than before unless it is zero. The next
// page is the one before the last item's Time.
func (c *Client) ListInvocations(ctx context.Context, name string, limit int, before time.Time) ([]apiv1.Invocation, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if !before.IsZero() {
		q.Set("before", before.UTC().Format(time.RFC3339Nano))
	}
	path := c.nsPath("/functions/%s/invocations", name)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l apiv1.List[apiv1.Invocation]
	err := c.doJSON(ctx, http.MethodGet, path, nil, &l)
	return l.Items, err
}

// WaitFunction polls until the function leaves Pending/Building (or until ctx ends) and returns it.
func (c *Client) WaitFunction(ctx context.Context, name string, interval time.Duration) (*apiv1.Function, error) {
	for {
		f, err := c.GetFunction(ctx, name)
		if err != nil {
			return nil, err
		}
		if f.Status.Phase == apiv1.PhaseReady || f.Status.Phase == apiv1.PhaseFailed {
			return f, nil
		}
		select {
		case <-ctx.Done():
			return f, fmt.Errorf("function %s still %s: %w", name, f.Status.Phase, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// ListTriggers lists the namespace's triggers.
func (c *Client) ListTriggers(ctx context.Context) ([]apiv1.Trigger, error) {
	var l apiv1.List[apiv1.Trigger]
	err := c.doJSON(ctx, http.MethodGet, c.nsPath("/triggers"), nil, &l)
	return l.Items, err
}

// GetTrigger reads one trigger.
func (c *Client) GetTrigger(ctx context.Context, name string) (*apiv1.Trigger, error) {
	var t apiv1.Trigger
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/triggers/%s", name), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// CreateTrigger creates a trigger.
func (c *Client) CreateTrigger(ctx context.Context, t apiv1.Trigger) (*apiv1.Trigger, error) {
	var out apiv1.Trigger
	if err := c.doJSON(ctx, http.MethodPost, c.nsPath("/triggers"), t, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetTriggerEnabled enables or disables a trigger in place.
func (c *Client) SetTriggerEnabled(ctx context.Context, name string, enabled bool) (*apiv1.Trigger, error) {
	var out apiv1.Trigger
	if err := c.doJSON(ctx, http.MethodPatch, c.nsPath("/triggers/%s", name), apiv1.TriggerPatch{Enabled: &enabled}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteTrigger deletes a trigger.
func (c *Client) DeleteTrigger(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, c.nsPath("/triggers/%s", name), nil, nil)
}

// ListJobs lists the namespace's jobs.
func (c *Client) ListJobs(ctx context.Context) ([]apiv1.Job, error) {
	var l apiv1.List[apiv1.Job]
	err := c.doJSON(ctx, http.MethodGet, c.nsPath("/jobs"), nil, &l)
	return l.Items, err
}

// CreateJob creates a job; a run_id above 0 runs it.
func (c *Client) CreateJob(ctx context.Context, j apiv1.Job) (*apiv1.Job, error) {
	var out apiv1.Job
	if err := c.doJSON(ctx, http.MethodPost, c.nsPath("/jobs"), j, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutJob updates a job; a higher run_id runs it again.
func (c *Client) PutJob(ctx context.Context, j apiv1.Job) (*apiv1.Job, error) {
	var out apiv1.Job
	if err := c.doJSON(ctx, http.MethodPut, c.nsPath("/jobs/%s", j.Name), j, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetJob reads one job.
func (c *Client) GetJob(ctx context.Context, name string) (*apiv1.Job, error) {
	var j apiv1.Job
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/jobs/%s", name), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// DeleteJob deletes a job.
func (c *Client) DeleteJob(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, c.nsPath("/jobs/%s", name), nil, nil)
}

// ListSecrets lists the namespace's secrets (names, keys and versions: never a value).
func (c *Client) ListSecrets(ctx context.Context) ([]apiv1.Secret, error) {
	var l apiv1.List[apiv1.Secret]
	err := c.doJSON(ctx, http.MethodGet, c.nsPath("/secrets"), nil, &l)
	return l.Items, err
}

// GetSecret describes one secret.
func (c *Client) GetSecret(ctx context.Context, name string) (*apiv1.Secret, error) {
	var s apiv1.Secret
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/secrets/%s", name), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// PutSecret creates or replaces a secret whole; the functions that use it restart with the new
// values.
func (c *Client) PutSecret(ctx context.Context, name string, data map[string]string) (*apiv1.Secret, error) {
	var s apiv1.Secret
	if err := c.doJSON(ctx, http.MethodPut, c.nsPath("/secrets/%s", name), apiv1.SecretPut{Data: data}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSecret deletes a secret (409 while a function uses it).
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, c.nsPath("/secrets/%s", name), nil, nil)
}
