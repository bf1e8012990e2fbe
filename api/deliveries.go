package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
)

// deliveryReport answers POST /events/{ns}/deliveries: a namespace's event source outside this
// process (its rabbitmq consumer on Kubernetes) reports what became of its deliveries, with the
// namespace's event token. Counted on sless_deliveries_total; each dead letter a Warning event on
// the trigger's function (as the single host records them in process). The function is the stored
// trigger's, not the report's: a token writes only to its own namespace's functions.
func (s *Server) deliveryReport(w http.ResponseWriter, r *http.Request) {
	ns := pathVar(r, "ns")
	if !apiv1.ValidEventToken(s.o.eventKey, ns, r.Header.Get(apiv1.HeaderEventToken)) {
		writeError(w, r, apiv1.Errorf(apiv1.CodeUnauthenticated, "a delivery report needs its namespace's event token in %s", apiv1.HeaderEventToken))
		return
	}
	// Strict: a field the API does not read (a "function" to write events to) is a mistake or a
	// forgery, not something to ignore.
	var rep apiv1.DeliveryReport
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		writeError(w, r, invalid("the body is not a delivery report: %v", err))
		return
	}
	if err := apiv1.ValidName("trigger", rep.Trigger); err != nil {
		writeError(w, r, err)
		return
	}
	for _, n := range []int64{rep.Acked, rep.Retried, rep.DeadLettered} {
		if n < 0 || n > apiv1.MaxReportedCount {
			writeError(w, r, invalid("counts must be 0 to %d", apiv1.MaxReportedCount))
			return
		}
	}
	if len(rep.DeadLetters) > apiv1.MaxReportedDeadLetters || int64(len(rep.DeadLetters)) > rep.DeadLettered {
		writeError(w, r, invalid("at most %d dead letters, and no more than dead_lettered", apiv1.MaxReportedDeadLetters))
		return
	}
	tr, err := s.b.Triggers.Get(r.Context(), ns, rep.Trigger)
	if err != nil {
		writeError(w, r, notFound("trigger", rep.Trigger, err))
		return
	}
	if tr.Spec.Type != apiv1.TriggerRabbitMQ {
		writeError(w, r, invalid("trigger %q is not a rabbitmq trigger", rep.Trigger))
		return
	}
	s.deliveries.Add(apiv1.SourceRabbitMQ, delivery.Ack, rep.Acked)
	s.deliveries.Add(apiv1.SourceRabbitMQ, delivery.Retry, rep.Retried)
	s.deliveries.Add(apiv1.SourceRabbitMQ, delivery.DeadLetter, rep.DeadLettered)
	fn := tr.Spec.FunctionRef
	for _, d := range rep.DeadLetters {
		s.warnings.Record(r.Context(), ns, fn, delivery.DeadLettered(cut(d.MessageID, 200), rep.Trigger, cut(d.Queue, 255), cut(d.Reason, 1000)))
	}
	if more := rep.DeadLettered - int64(len(rep.DeadLetters)); more > 0 {
		s.warnings.Record(r.Context(), ns, fn, apiv1.Event{Type: apiv1.EventWarning, Reason: apiv1.ReasonDeadLettered,
			Message: fmt.Sprintf("%d more messages of rabbitmq trigger %s dead-lettered", more, rep.Trigger)})
	}
	w.WriteHeader(http.StatusNoContent)
}

// cut bounds a reported string to n bytes of valid UTF-8 (fnlog clips whole messages; this keeps
// one field from crowding out the others).
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}
