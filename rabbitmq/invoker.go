package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
)

// FunctionInvoker sends each message to a function through /fn/ — the activator's path, so a
// function at zero is started and the message waits, and an in-flight delivery keeps an instance
// from scaling down — as a POST whose body is the message body and whose X-Sless-Event-* headers
// carry its properties and headers.
type FunctionInvoker struct {
	Namespace, Function, Trigger string
	// Handler is /fn/ in this process (api.Server.Events); without it Client sends to BaseURL
	// (the API's address).
	Handler http.Handler
	Client  *http.Client
	BaseURL string
}

// Invoke sends m and reads what came back: the status, whether the function or /fn/ answered,
// /fn/'s Retry-After.
func (f FunctionInvoker) Invoke(ctx context.Context, m Message) delivery.Outcome {
	target := "/fn/" + url.PathEscape(f.Namespace) + "/" + url.PathEscape(f.Function)
	if f.Handler == nil {
		target = f.BaseURL + target
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(m.Body))
	if err != nil {
		return delivery.Outcome{Err: err}
	}
	setEventHeaders(req.Header, f.Trigger, m)
	if f.Handler != nil {
		var w delivery.Answer
		f.Handler.ServeHTTP(&w, req)
		return w.Outcome()
	}
	// A redirect is the function's answer, not somewhere to send the message (and the event
	// token a client adds) next.
	c := *f.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		if opErr, ok := errors.AsType[*net.OpError](err); ok && opErr.Op == "dial" && ctx.Err() == nil {
			// /fn/ itself is out of reach (an API rollout, its Service without endpoints): nothing
			// was sent, so it is back-pressure like /fn/'s 503, not an attempt of the function's.
			return delivery.Outcome{Status: http.StatusServiceUnavailable, Err: err}
		}
		return delivery.Outcome{Err: err}
	}
	resp.Body.Close()
	return delivery.Read(resp.StatusCode, resp.Header)
}

func setEventHeaders(h http.Header, trigger string, m Message) {
	h.Set("Content-Type", m.ContentType)
	if m.ContentType == "" {
		h.Set("Content-Type", "application/octet-stream")
	}
	h.Set(apiv1.HeaderEventSource, apiv1.SourceRabbitMQ)
	h.Set(apiv1.HeaderEventTrigger, trigger)
	set := func(k, v string) {
		if v != "" {
			h.Set(k, headerSafe(v))
		}
	}
	set(apiv1.HeaderEventMessageID, m.MessageID)
	set(apiv1.HeaderEventCorrelationID, m.CorrelationID)
	set(apiv1.HeaderEventExchange, m.Exchange)
	set(apiv1.HeaderEventRoutingKey, m.RoutingKey)
	h.Set(apiv1.HeaderEventRedelivered, strconv.FormatBool(m.Redelivered))
	h.Set(apiv1.HeaderEventDeliveryCount, strconv.Itoa(m.DeliveryCount))
	if len(m.Headers) > 0 {
		if b, err := json.Marshal(jsonable(m.Headers)); err == nil {
			h.Set(apiv1.HeaderEventHeaders, string(b))
		}
	}
}

// headerSafe keeps a property a publisher chose from breaking the request: control characters
// (CR, LF) become spaces. JSON-encoded headers are ASCII already.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}

// jsonable turns AMQP table values JSON cannot take (byte slices, decimals, nested tables) into
// ones it can.
func jsonable(t map[string]any) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = jsonValue(v)
	}
	return out
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case map[string]any:
		return jsonable(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i])
		}
		return out
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case string, bool, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, nil:
		return x
	}
	return nil
}
