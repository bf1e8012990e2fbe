package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/rabbitmq"
)

// ReportEvery is how often the deliveries are reported to the API (POST /events/{ns}/deliveries):
// it counts them on sless_deliveries_total and records each dead letter as a DeadLettered event on
// the function, which this pod can do neither of itself (it serves no metrics and holds no code
// store credential).
const ReportEvery = 2 * time.Second

// reporter sums each trigger's outcomes between reports.
type reporter struct {
	mu      sync.Mutex
	pending map[string]*apiv1.DeliveryReport
}

// observe counts one decision of trigger's consumer (dlq: its dead-letter queue).
func (rp *reporter) observe(trigger, dlq string, res rabbitmq.Result) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rep := rp.report(trigger)
	switch res.Decision.Action {
	case delivery.Ack:
		rep.Acked++
	case delivery.Retry:
		rep.Retried++
	case delivery.DeadLetter:
		rep.DeadLettered++
		if len(rep.DeadLetters) < apiv1.MaxReportedDeadLetters {
			rep.DeadLetters = append(rep.DeadLetters, apiv1.ReportedDeadLetter{MessageID: res.Message.MessageID, Queue: dlq, Reason: res.Decision.Reason})
		}
	}
}

// report is trigger's pending report. Called with mu held.
func (rp *reporter) report(trigger string) *apiv1.DeliveryReport {
	if rp.pending == nil {
		rp.pending = map[string]*apiv1.DeliveryReport{}
	}
	rep := rp.pending[trigger]
	if rep == nil {
		rep = &apiv1.DeliveryReport{Trigger: trigger}
		rp.pending[trigger] = rep
	}
	return rep
}

// take empties the pending reports.
func (rp *reporter) take() map[string]*apiv1.DeliveryReport {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	out := rp.pending
	rp.pending = nil
	return out
}

// putBack returns a report the API could not take now to the next one (counts add up, named dead
// letters up to the bound).
func (rp *reporter) putBack(rep *apiv1.DeliveryReport) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	cur := rp.report(rep.Trigger)
	// Bounded as the API takes them: a long outage loses counts beyond, not the whole report.
	add := func(n *int64, m int64) { *n = min(*n+m, apiv1.MaxReportedCount) }
	add(&cur.Acked, rep.Acked)
	add(&cur.Retried, rep.Retried)
	add(&cur.DeadLettered, rep.DeadLettered)
	for _, d := range rep.DeadLetters {
		if len(cur.DeadLetters) < apiv1.MaxReportedDeadLetters {
			cur.DeadLetters = append(cur.DeadLetters, d)
		}
	}
}

// reportLoop sends the reports every ReportEvery until ctx ends (the last one is the caller's,
// once the consumers stopped).
func (r *Runner) reportLoop(ctx context.Context) {
	t := time.NewTicker(ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.flushReports(ctx)
		}
	}
}

// flushReports posts every pending report; one the API did not take (unreachable, 5xx) waits for
// the next, one it refused (the trigger deleted: 404) is dropped.
func (r *Runner) flushReports(ctx context.Context) {
	for _, rep := range r.reports.take() {
		if rep.Acked+rep.Retried+rep.DeadLettered == 0 {
			continue
		}
		status, err := r.postReport(ctx, rep)
		switch {
		case err != nil || status >= 500:
			r.reports.putBack(rep)
			r.Log.Warn("reporting deliveries to the API", "trigger", rep.Trigger, "status", status, "error", err)
		case status >= 300:
			r.Log.Warn("the API refused a delivery report", "trigger", rep.Trigger, "status", status)
		}
	}
}

func (r *Runner) postReport(ctx context.Context, rep *apiv1.DeliveryReport) (int, error) {
	b, err := json.Marshal(rep)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.APIURL+"/events/"+url.PathEscape(r.Namespace)+"/deliveries", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST …/deliveries: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
