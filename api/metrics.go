package api

import "github.com/prometheus/client_golang/prometheus"

// metrics are the API's own Prometheus collectors, on a registry of their own (no global state,
// so several servers can live in one test process).
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	uploadBytes prometheus.Histogram
}

// newMetrics makes the API's own collectors (/fn/'s are package invoke's, on the same registry).
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
		uploadBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sless_upload_bytes", Help: "Size of the code archives uploaded (accepted ones).",
			Buckets: prometheus.ExponentialBuckets(1<<10, 4, 10), // 1 KiB … 256 MiB
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.uploadBytes,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
