package apitest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/rabbitmq"
)

// An event source outside the API's process (a Kubernetes namespace's consumer) is trusted only
// with its namespace's token (api.WithEventKey): the valid token keeps the event headers and
// records the source; a forged token, another namespace's token, a token on a public path of
// another namespace and no token are a public request's (headers dropped, no source). The token
// itself never reaches the function.
func testProxyEventToken(t *testing.T, bk Backend) {
	key := []byte("test event key, 32 bytes long...")
	e := NewEnv(t, bk, api.WithEventKey(key))
	e.Ensure()
	e.Function("echo")
	seen := make(chan http.Header, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
	}))
	t.Cleanup(up.Close)
	e.Ready("echo", up.URL)
	other := apiv1.NamespaceFor("mallory@example.com")

	send := func(t *testing.T, token, id string) http.Header {
		t.Helper()
		inv := rabbitmq.FunctionInvoker{Namespace: e.NS, Function: "echo", Trigger: "orders", BaseURL: e.URL,
			Client: &http.Client{Transport: tokenTransport(token)}}
		if out := inv.Invoke(context.Background(), rabbitmq.Message{Body: []byte("x"), MessageID: id}); out.Status != 200 || out.Err != nil {
			t.Fatalf("outcome %+v", out)
		}
		h := <-seen
		for k := range h {
			if strings.EqualFold(k, apiv1.HeaderEventToken) {
				t.Errorf("the token reached the function")
			}
		}
		return h
	}
	trusted := func(h http.Header) bool {
		return h.Get(apiv1.HeaderEventSource) == apiv1.SourceRabbitMQ
	}
	if h := send(t, apiv1.EventToken(key, e.NS), "good"); !trusted(h) || h.Get(apiv1.HeaderEventMessageID) != "good" {
		t.Errorf("the namespace's own token: event headers %v, want kept", h)
	}
	for _, c := range []struct{ name, token string }{
		{"no token", ""},
		{"a forged token", strings.Repeat("0", 64)},
		{"a token under another key", apiv1.EventToken([]byte("another key"), e.NS)},
		{"another namespace's token", apiv1.EventToken(key, other)},
		{"the token in upper case", strings.ToUpper(apiv1.EventToken(key, e.NS))},
	} {
		t.Run(c.name, func(t *testing.T) {
			if h := send(t, c.token, "forged-"+strings.ReplaceAll(c.name, " ", "-")); trusted(h) || h.Get(apiv1.HeaderEventMessageID) != "" {
				t.Errorf("event headers reached the function: %v", h)
			}
		})
	}
	invs, err := e.Be.Invocations.List(context.Background(), e.NS, "echo", objects.InvocationQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range invs {
		if (i.MessageID == "good") != (i.Source == apiv1.SourceRabbitMQ) || strings.HasPrefix(i.MessageID, "forged") {
			t.Errorf("invocation %+v: only the valid token's call is from rabbitmq", i)
		}
	}
}

// tokenTransport sends every request with token in apiv1.HeaderEventToken ("" for none).
type tokenTransport string

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tt != "" {
		r = r.Clone(r.Context())
		r.Header.Set(apiv1.HeaderEventToken, string(tt))
	}
	return http.DefaultTransport.RoundTrip(r)
}
