package async

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sless-dev/sless/objects"
)

// Collector reports each function's asynchronous queue at scrape time, read from the queue (so
// every replica of a shared queue reports the same figures: aggregate them across replicas with
// max, not sum): sless_async_queue_depth (events
// not done), sless_async_oldest_age_seconds (the oldest of those, since it was enqueued) and
// sless_async_dead_letters. A queue that cannot answer within a scrape reports nothing.
type Collector struct{ queue objects.AsyncQueue }

// NewCollector reports q.
func NewCollector(q objects.AsyncQueue) *Collector { return &Collector{queue: q} }

var (
	depthDesc = prometheus.NewDesc("sless_async_queue_depth",
		"Asynchronous invocations of a function not done yet (queued, running or waiting for a retry).", []string{"namespace", "function"}, nil)
	oldestDesc = prometheus.NewDesc("sless_async_oldest_age_seconds",
		"Age of a function's oldest asynchronous invocation not done yet, since it was accepted or redriven.", []string{"namespace", "function"}, nil)
	deadDesc = prometheus.NewDesc("sless_async_dead_letters",
		"A function's dead-lettered asynchronous invocations kept (GET …/dead-letters).", []string{"namespace", "function"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestDesc
	ch <- deadDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.queue.Stats(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(s.Depth), s.Namespace, s.Function)
		age := 0.0
		if s.Depth > 0 && !s.Oldest.IsZero() {
			age = max(now.Sub(s.Oldest).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, s.Namespace, s.Function)
		ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(s.DeadLetters), s.Namespace, s.Function)
	}
}
