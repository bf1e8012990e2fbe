package oci

import (
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/layers"
)

// Option configures a Builder.
type Option func(*options) error

type options struct {
	transport http.RoundTripper
	keychain  authn.Keychain
	insecure  bool
	skipTLS   bool
	modTime   time.Time
	progress  func(Progress)
	baseTTL   time.Duration
	layerOpts []layers.Option
	jobs      int
}

func makeOptions(opts ...Option) (*options, error) {
	o := &options{
		keychain: authn.DefaultKeychain,
		modTime:  time.Unix(0, 0).UTC(),
		jobs:     4,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.transport == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if o.skipTLS {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with WithSkipTLSVerify
		}
		o.transport = t
	}
	if o.jobs < 1 {
		return nil, errors.New("oci: WithJobs needs at least 1")
	}
	return o, nil
}

// WithTransport sets the HTTP transport for every registry request. Tests pass a counting one.
// The default is a clone of remote.DefaultTransport.
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) error { o.transport = t; return nil }
}

// WithKeychain sets where registry credentials come from.
// The default is authn.DefaultKeychain (docker config files).
func WithKeychain(k authn.Keychain) Option {
	return func(o *options) error { o.keychain = k; return nil }
}

// WithInsecure allows plain HTTP to every registry (registries on localhost and 127.0.0.1 speak
// HTTP without it). It does not turn off TLS verification: see WithSkipTLSVerify. The default is
// false.
func WithInsecure(insecure bool) Option {
	return func(o *options) error { o.insecure = insecure; return nil }
}

// WithSkipTLSVerify accepts any TLS certificate from registries (a test registry with a
// self-signed one). The default is false: certificates are verified.
func WithSkipTLSVerify(skip bool) Option {
	return func(o *options) error { o.skipTLS = skip; return nil }
}

// WithModTime sets the image's Created time and the code layer's mtimes (SOURCE_DATE_EPOCH).
// The default is the Unix epoch.
func WithModTime(t time.Time) Option {
	return func(o *options) error { o.modTime = t.UTC().Truncate(time.Second); return nil }
}

// WithProgress receives progress events (resolving the base, layering, bytes pushed).
// The default is none: the builder is silent.
func WithProgress(f func(Progress)) Option {
	return func(o *options) error { o.progress = f; return nil }
}

// WithBaseTTL sets how long a runtime image tag stays resolved to the digest seen first; content
// behind a digest is cached for the builder's lifetime. The default is 0: a tag is resolved once per
// Builder, so every build of a process uses the same runtime.
func WithBaseTTL(d time.Duration) Option {
	return func(o *options) error { o.baseTTL = d; return nil }
}

// WithLayerOptions passes options (limits, temp dir) to the code layer.
// The default is the layers package defaults.
func WithLayerOptions(opts ...layers.Option) Option {
	return func(o *options) error { o.layerOpts = append(o.layerOpts, opts...); return nil }
}

// WithJobs sets how many blobs are pushed concurrently. The default is 4.
func WithJobs(n int) Option {
	return func(o *options) error { o.jobs = n; return nil }
}

// Progress is one event reported through WithProgress.
type Progress struct {
	Stage string // "resolve", "layer", "push"
	// Message is a short human-readable description of the event.
	Message string
	// Sent is the number of blob bytes uploaded so far in this push (Stage "push").
	Sent int64
}
