package invoke

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/activator"
	"github.com/sless-dev/sless/objects"
)

// metrics are /fn/'s per-function series (labels namespace, function): bounded by the functions
// there are (the tenant's function quota) and deleted with the function (forget).
type metrics struct {
	fnRequests    *prometheus.CounterVec
	fnSeconds     *prometheus.HistogramVec
	coldStarts    *prometheus.CounterVec
	coldStartSecs *prometheus.HistogramVec
	loads         *loadCollector
	asyncAccepted prometheus.Counter
}

func newMetrics(loads func() []activator.Load, view *objects.ServingView) *metrics {
	fn := []string{"namespace", "function"}
	return &metrics{
		fnRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_function_requests_total", Help: "Requests through /fn/ by function and status code.",
		}, append(fn, "code")),
		fnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_function_request_duration_seconds", Help: "Duration of requests through /fn/, holding included.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, fn),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sless_function_cold_starts_total", Help: "Requests that arrived when the function had no ready instance.",
		}, fn),
		coldStartSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sless_function_cold_start_duration_seconds", Help: "From a cold request's arrival (hold start) to the function's first byte.",
			Buckets: []float64{.05, .1, .2, .3, .4, .5, .75, 1, 1.5, 2, 3, 5, 10, 30},
		}, fn),
		loads: newLoadCollector(loads, view),
		asyncAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sless_async_accepted_total", Help: "Asynchronous invocations /fn/ stored and answered 202.",
		}),
	}
}

func (m *metrics) register(r prometheus.Registerer) {
	r.MustRegister(m.fnRequests, m.fnSeconds, m.coldStarts, m.coldStartSecs, m.loads, m.asyncAccepted)
}

// forget deletes a function's series.
func (m *metrics) forget(ns, name string) {
	l := prometheus.Labels{"namespace": ns, "function": name}
	m.fnRequests.DeletePartialMatch(l)
	m.fnSeconds.DeletePartialMatch(l)
	m.coldStarts.DeletePartialMatch(l)
	m.coldStartSecs.DeletePartialMatch(l)
}

// CodeLabel is the status code as a metric label, or "other" for a code no RFC names: a function
// chooses its codes, and every one of 100–999 would be a series of its own.
func CodeLabel(code int) string {
	if http.StatusText(code) == "" {
		return "other"
	}
	return strconv.Itoa(code)
}

// loadCollector reports what the activator holds now, in flight and held per function, and
// each of those functions' ready and desired instances as /fn/'s serving view has them — all read
// at scrape time, for the functions the activator knows, so a forgotten function has no series.
type loadCollector struct {
	loads          func() []activator.Load
	inFlight, held *prometheus.Desc
	// status reads a function from the serving view (nil: no replica gauges).
	status            func(ctx context.Context, ns, name string) (objects.Function, error)
	replicas, desired *prometheus.Desc
}

func newLoadCollector(loads func() []activator.Load, view *objects.ServingView) *loadCollector {
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
