package build

import (
	"errors"
	"time"
)

// Option configures a Pipeline.
type Option func(*options) error

type options struct {
	registry          string
	runtimes          map[string]string
	deps              Deps
	indexes           map[string]string
	observe           func(Observation)
	timeout           time.Duration
	concurrency       int
	tenantConcurrency int
	tempDir           string
}

func makeOptions(opts ...Option) (options, error) {
	o := options{runtimes: map[string]string{}, indexes: map[string]string{}, timeout: 10 * time.Minute, concurrency: 2, tenantConcurrency: 1}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.registry == "" {
		return o, errors.New("build: the registry function images go to is required, see build.WithRegistry")
	}
	if o.concurrency < 1 {
		return o, errors.New("build: WithConcurrency needs at least 1")
	}
	return o, nil
}

// WithRegistry is where function images are pushed ("host[:port]", images go to
// <registry>/<namespace>/<function>). Required.
func WithRegistry(host string) Option {
	return func(o *options) error { o.registry = host; return nil }
}

// WithRuntimes maps runtime names to their images by digest. A function of a runtime missing here
// fails to build (a user error: its spec names a runtime this platform does not run). The default
// is none.
func WithRuntimes(m map[string]string) Option {
	return func(o *options) error {
		for k, v := range m {
			o.runtimes[k] = v
		}
		return nil
	}
}

// WithDeps obtains dependency layers for requests that bring no Deps of their own. The default is
// none: code with dependency manifests fails with ErrNoDeps.
func WithDeps(d Deps) Option { return func(o *options) error { o.deps = d; return nil } }

// WithIndex sets the package index dependency installs of a language's runtimes use ("python":
// the pip index URL, "node": the npm registry). The default is the installer's own.
func WithIndex(language, url string) Option {
	return func(o *options) error {
		if url != "" {
			o.indexes[language] = url
		}
		return nil
	}
}

// Observation is what an observer hears of a finished build.
type Observation struct {
	Result   string // "succeeded" or "failed"
	Duration time.Duration
	Runtime  string
	// Dependencies says what became of the function's dependency layer: "" (none, or the build
	// failed before it), "cached" (an existing layer), "installed" (installed for this build: here
	// or by a deps Job) or "failed" (the install failed).
	Dependencies string
}

// WithObserver is told of every finished build (pending ones are not finished; cancelled ones are
// not counted), for metrics. The default is none.
func WithObserver(f func(Observation)) Option {
	return func(o *options) error { o.observe = f; return nil }
}

// WithTimeout bounds one build, dependency installs made in place included. The default is 10
// minutes.
func WithTimeout(d time.Duration) Option { return func(o *options) error { o.timeout = d; return nil } }

// WithConcurrency bounds the builds running at once; a build that finds every slot taken is
// pending (it does not wait). The default is 2.
func WithConcurrency(n int) Option { return func(o *options) error { o.concurrency = n; return nil } }

// WithTenantConcurrency bounds the builds of one namespace running at once (0: no bound beyond
// WithConcurrency), so that one tenant's slow or hanging builds cannot take every slot. The
// default is 1.
func WithTenantConcurrency(n int) Option {
	return func(o *options) error { o.tenantConcurrency = n; return nil }
}

// WithTempDir is where fetched archives are spooled. The default is os.TempDir().
func WithTempDir(dir string) Option { return func(o *options) error { o.tempDir = dir; return nil } }
