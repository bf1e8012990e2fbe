package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/activator"
)

// metrics are the API's own Prometheus collectors, on a registry of their own (no global state,
// so several servers can live in one test process).
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	builds      *BuildMetrics
	uploadBytes prometheus.Histogram

	// Per function (labels namespace, function): bounded by the functions there are (the
	// tenant's function quota) and deleted with the function (forget).
	fnRequests    *prometheus.CounterVec
	fnSeconds     *prometheus.HistogramVec
	coldStarts    *prometheus.CounterVec
	coldStartSecs *prometheus.HistogramVec
}

// forget deletes a function's series.
func (m *metrics) forget(ns, name string) {
	l := prometheus.Labels{"namespace": ns, "function": name}
	m.fnRequests.DeletePartialMatch(l)
	m.fnSeconds.DeletePartialMatch(l)
	m.coldStarts.DeletePartialMatch(l)
	m.coldStartSecs.DeletePartialMatch(l)
}

// loadCollector reports what the activator holds now, in flight and held per function, and
// each of those functions' ready and desired instances as /fn/'s serving view has them — all read
// at scrape time, for the functions the activator knows, so a forgotten function has no series.
type loadCollector struct {
	loads          func() []activator.Load
	inFlight, held *prometheus.Desc
	// status reads a function from the serving view (nil: no replica gauges).
	status            func(ctx context.Context, ns, name string) (Function, error)
	replicas, desired *prometheus.Desc
}

func newLoadCollector(loads func() []activator.Load, view *ServingView) *loadCollector {
	fn := []string{"namespace", "function"}
	c := &loadCollector{loads: loads,
		inFlight: prometheus.NewDesc("sless_function_in_flight_requests", "Requests a function's instances are serving now, through this API replica.", fn, nil),
		held:     prometheus.NewDesc("sless_function_held_requests", "Requests of a function waiting for an instance in this API replica.", fn, nil),
		replicas: prometheus.NewDesc("sless_function_replicas", "A function's instances ready now (its status.replicas).", fn, nil),
		desired:  prometheus.NewDesc("sless_function_desired_replicas", "The instances the platform is scaling a function to (its status.desired_replicas).", fn, nil),
	}
	if view != nil && view.Functions != nil {
		c.status = view.Functions.Get
	}
	return c
}

func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.held
	ch <- c.replicas
	ch <- c.desired
}

func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range c.loads() {
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(l.InFlight), l.Namespace, l.Name)
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(l.Held), l.Namespace, l.Name)
		if c.status == nil {
			continue
		}
		// The serving view answers from memory (the informer cache; the store otherwise). A
		// function it no longer has gets no replica series (/fn/ forgets it on its next request).
		f, err := c.status(ctx, l.Namespace, l.Name)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(f.Status.Replicas), l.Namespace, l.Name)
		ch <- prometheus.MustNewConstMetric(c.desired, prometheus.GaugeValue, float64(f.Status.DesiredReplicas), l.Namespace, l.Name)
	}
}

// newMetrics makes the collectors, counting builds on builds (nil: a set of its own).
func newMetrics(builds *BuildMetrics) *metrics {
	if builds == nil {
		builds = NewBuildMetrics()
	}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_http_requests_total", Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_http_request_duration_seconds", Help: "HTTP request latency by route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		builds: builds,
		uploadBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sless_upload_bytes", Help: "Size of the code archives uploaded (accepted ones).",
			Buckets: prometheus.ExponentialBuckets(1<<10, 4, 10), // 1 KiB … 256 MiB
		}),
	}
	fn := []string{"namespace", "function"}
	m.fnRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sless_function_requests_total", Help: "Requests through /fn/ by function and status code.",
	}, append(fn, "code"))
	m.fnSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sless_function_request_duration_seconds", Help: "Duration of requests through /fn/, holding included.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, fn)
	m.coldStarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sless_function_cold_starts_total", Help: "Requests that arrived when the function had no ready instance.",
	}, fn)
	m.coldStartSecs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sless_function_cold_start_duration_seconds", Help: "From a cold request's arrival (hold start) to the function's first byte.",
		Buckets: []float64{.05, .1, .2, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 10, 30},
	}, fn)
	m.reg.MustRegister(m.fnRequests, m.fnSeconds, m.coldStarts, m.coldStartSecs)
	m.reg.MustRegister(m.requests, m.latency, m.builds, m.uploadBytes,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// BuildMetrics counts finished builds and what became of their dependency layers, for /metrics:
// on the API's registry when the controllers run in the same process, on the controller's own
// registry when they run apart.
type BuildMetrics struct {
	builds       *prometheus.CounterVec
	seconds      *prometheus.HistogramVec
	depsHits     *prometheus.CounterVec
	depsInstalls *prometheus.CounterVec
}

var _ prometheus.Collector = (*BuildMetrics)(nil)

// NewBuildMetrics makes the build counters, registered nowhere yet.
func NewBuildMetrics() *BuildMetrics {
	b := &BuildMetrics{
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

// Observe records a finished build ("succeeded" or "failed").
func (b *BuildMetrics) Observe(result string, d time.Duration) {
	b.builds.WithLabelValues(result).Inc()
	b.seconds.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveDependencies records what became of a build's dependency layer: "cached", "installed",
// "failed" (an install that failed); "" (no dependencies) records nothing.
func (b *BuildMetrics) ObserveDependencies(runtime, outcome string) {
	switch outcome {
	case "cached":
		b.depsHits.WithLabelValues(runtime).Inc()
	case "installed":
		b.depsInstalls.WithLabelValues(runtime, "succeeded").Inc()
	case "failed":
		b.depsInstalls.WithLabelValues(runtime, "failed").Inc()
	}
}

func (b *BuildMetrics) Describe(ch chan<- *prometheus.Desc) {
	b.builds.Describe(ch)
	b.seconds.Describe(ch)
	b.depsHits.Describe(ch)
	b.depsInstalls.Describe(ch)
}

func (b *BuildMetrics) Collect(ch chan<- prometheus.Metric) {
	b.builds.Collect(ch)
	b.seconds.Collect(ch)
	b.depsHits.Collect(ch)
	b.depsInstalls.Collect(ch)
}
