package rabbitmq_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/rabbitmq"
)

// Over HTTP: /fn/ out of reach (nothing sent) is back-pressure, retried without counting; a
// connection that breaks after the request went is a counted attempt; /fn/'s own answers and the
// function's are told apart by X-Sless-Error.
func TestFunctionInvokerOverHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	policy := delivery.Policy{MaxRetries: 1}
	inv := rabbitmq.FunctionInvoker{Namespace: "ns", Function: "f", Client: http.DefaultClient, BaseURL: closed}
	out := inv.Invoke(context.Background(), rabbitmq.Message{MessageID: "m"})
	if d := policy.Decide(out, 1); out.Status != http.StatusServiceUnavailable || out.FromFunction || d.Action != delivery.Retry || d.Counts {
		t.Errorf("/fn/ out of reach: %+v → %+v, want an uncounted retry", out, d)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close() // the request arrived, no answer: a lost instance
	}))
	t.Cleanup(broken.Close)
	out = rabbitmq.FunctionInvoker{Namespace: "ns", Function: "f", Client: http.DefaultClient, BaseURL: broken.URL}.Invoke(context.Background(), rabbitmq.Message{})
	if d := policy.Decide(out, 0); out.Status != 0 || !d.Counts {
		t.Errorf("a connection lost after sending: %+v → %+v, want a counted attempt", out, d)
	}

	fnErr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(apiv1.HeaderError, apiv1.CodeNotReady)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(fnErr.Close)
	out = rabbitmq.FunctionInvoker{Namespace: "ns", Function: "f", Client: http.DefaultClient, BaseURL: fnErr.URL}.Invoke(context.Background(), rabbitmq.Message{})
	if out.Status != 503 || out.FromFunction || out.RetryAfter.Seconds() != 2 {
		t.Errorf("/fn/'s 503: %+v", out)
	}

	// A function's redirect is its answer: not followed, so neither the message nor a token the
	// client adds goes where the function points.
	var followed atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed.Add(1) }))
	t.Cleanup(elsewhere.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	out = rabbitmq.FunctionInvoker{Namespace: "ns", Function: "f", Client: http.DefaultClient, BaseURL: redirect.URL}.Invoke(context.Background(), rabbitmq.Message{})
	if out.Status != http.StatusTemporaryRedirect || !out.FromFunction || followed.Load() != 0 {
		t.Errorf("a function's 307: %+v, %d requests followed it", out, followed.Load())
	}
}
