package api

import "github.com/prometheus/client_golang/prometheus"

// metrics are the API's own Prometheus collectors, on a registry of their own (no global state,
// so several servers can live in one test process).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	builds       *prometheus.CounterVec
	buildSeconds prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_http_requests_total", Help: "HTTP requests by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_http_request_duration_seconds", Help: "HTTP request latency by route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_builds_total", Help: "Function builds by result (succeeded, failed).",
		}, []string{"result"}),
		buildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sless_build_duration_seconds", Help: "Function build duration.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.builds, m.buildSeconds,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
