package build

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts finished builds and what became of their dependency layers, for /metrics (a
// prometheus.Collector): on the API's registry when the controllers run in the same process, on
// the controller's own registry when they run apart. Observe is a WithObserver.
type Metrics struct {
	builds       *prometheus.CounterVec
	seconds      *prometheus.HistogramVec
	depsHits     *prometheus.CounterVec
	depsInstalls *prometheus.CounterVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics makes the build counters, registered nowhere yet.
func NewMetrics() *Metrics {
	b := &Metrics{
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_builds_total", Help: "Function builds by result (succeeded, failed).",
		}, []string{"result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_build_duration_seconds", Help: "Function build duration by result (succeeded, failed).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"result"}),
		depsHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_dependency_cache_hits_total", Help: "Builds whose dependency layer was in the cache already, by runtime.",
		}, []string{"runtime"}),
		depsInstalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_dependency_installs_total", Help: "Dependency installs a build waited for, by runtime and result (succeeded, failed).",
		}, []string{"runtime", "result"}),
	}
	// Both results exist from the start (at 0), so that rate() and absent() work before the
	// first build.
	for _, r := range []string{"succeeded", "failed"} {
		b.builds.WithLabelValues(r)
		b.seconds.WithLabelValues(r)
	}
	return b
}

// Observe records a finished build: its result and duration, and what became of its dependency
// layer ("cached", "installed", "failed" for an install that failed; "" records nothing).
func (b *Metrics) Observe(o Observation) {
	b.builds.WithLabelValues(o.Result).Inc()
	b.seconds.WithLabelValues(o.Result).Observe(o.Duration.Seconds())
	runtime := o.Runtime
	switch o.Dependencies {
	case "cached":
		b.depsHits.WithLabelValues(runtime).Inc()
	case "installed":
		b.depsInstalls.WithLabelValues(runtime, "succeeded").Inc()
	case "failed":
		b.depsInstalls.WithLabelValues(runtime, "failed").Inc()
	}
}

func (b *Metrics) Describe(ch chan<- *prometheus.Desc) {
	b.builds.Describe(ch)
	b.seconds.Describe(ch)
	b.depsHits.Describe(ch)
	b.depsInstalls.Describe(ch)
}

func (b *Metrics) Collect(ch chan<- prometheus.Metric) {
	b.builds.Collect(ch)
	b.seconds.Collect(ch)
	b.depsHits.Collect(ch)
	b.depsInstalls.Collect(ch)
}
