package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sless-dev/sless/api/apiv1"
)

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

// MetricsHandler serves GET /metrics from g, for a listener of its own: the series name every
// tenant's namespace, functions and traffic, so the public listener (Server.Handler) never serves
// them. With a token, a scrape must send "Authorization: Bearer <token>" (a platform credential:
// no tenant's JWT opens it), else 401 unauthenticated. Any other path answers 404.
func MetricsHandler(g prometheus.Gatherer, token string) http.Handler {
	serve := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	// Compared as digests, so that the comparison's time depends on neither the token's bytes
	// nor its length.
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			writeError(w, r, apiv1.Errorf(apiv1.CodeNotFound, "no route for %s %s: this listener serves GET /metrics only", r.Method, r.URL.EscapedPath()))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, r, &apiv1.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed on /metrics"})
			return
		}
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if sum := sha256.Sum256([]byte(got)); !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sless metrics"`)
				writeError(w, r, apiv1.Errorf(apiv1.CodeUnauthenticated, "send the platform's scrape token: Authorization: Bearer <token> (--metrics-token-file)"))
				return
			}
		}
		serve.ServeHTTP(w, r)
	})
}
