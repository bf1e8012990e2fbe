package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sless-dev/sless/api"
)

const testNS = "sless-0123456789abcdef"

// fnJSON is a function as the API answers one.
const fnJSON = `{"name":"f","runtime":"python3.11","entrypoint":"handler.handle","memory_mb":128,"timeout_sec":30,` +
	`"min_replicas":0,"max_replicas":10,"concurrency":10,"idle_timeout_sec":300,` +
	`"status":{"phase":"Pending","url":"http://127.0.0.1:8080/fn/` + testNS + `/f","replicas":0,"desired_replicas":0}}`

// logsPath, logLine and ndjson make the streamed answers' cases.
const (
	logsPath = "/v1/namespaces/" + testNS + "/functions/f/logs"
	logLine  = `{"time":"2026-12-01T20:00:00.123Z","instance":"f-1","stream":"stdout","line":"hello"}`
)

var ndjson = map[string]string{"Content-Type": "application/x-ndjson"}

// TestOpenAPICheckReports: the check around the server reports answers and requests that do not
// match the document, and passes those that do. A stand-in for the API answers what each case
// says, so the mismatches are the ones made on purpose.
func TestOpenAPICheckReports(t *testing.T) {
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"anything":"the function likes"}`)
	}))
	defer fn.Close()
	type answer struct {
		status int
		header map[string]string
		body   string
		viaFn  bool // passed on to a function, as /fn/ does
		// first calls a service with the request's context, as the Kubernetes store calls its
		// API server: that answer is not the function's
		backendCall bool
	}
	envelope := func(code string) string { return `{"error":{"code":"` + code + `","message":"m"}}` }
	for _, tc := range []struct {
		name                string
		method, path, token string
		body                string
		answer              answer
		want                string // in the report; "" for none
	}{
		{name: "health as documented", method: "GET", path: "/healthz",
			answer: answer{status: 200, body: `{"status":"ok"}`}},
		{name: "a field the schema does not list", method: "GET", path: "/healthz",
			answer: answer{status: 200, body: `{"status":"ok","uptime":3}`}, want: "the answer does not match the document"},
		{name: "a status the operation does not list", method: "GET", path: "/healthz",
			answer: answer{status: 201, body: `{"status":"ok"}`}, want: "201"},
		{name: "no X-Request-Id", method: "GET", path: "/healthz",
			answer: answer{status: 200, header: map[string]string{"X-Request-Id": ""}, body: `{"status":"ok"}`}, want: "X-Request-Id"},
		{name: "create as documented", method: "POST", path: "/v1/namespaces/" + testNS + "/functions", token: "t",
			body: `{"name":"f","runtime":"python3.11"}`, answer: answer{status: 201, body: fnJSON}},
		{name: "a function without its status", method: "POST", path: "/v1/namespaces/" + testNS + "/functions", token: "t",
			body:   `{"name":"f","runtime":"python3.11"}`,
			answer: answer{status: 201, body: strings.Replace(fnJSON, `,"status":{"phase":"Pending","url":"http://127.0.0.1:8080/fn/`+testNS+`/f","replicas":0,"desired_replicas":0}`, "", 1)},
			want:   "status"},
		{name: "a forbidden request accepted", method: "POST", path: "/v1/namespaces/" + testNS + "/functions", token: "t",
			body: `{"name":"Hello","runtime":"python3.11"}`, answer: answer{status: 201, body: fnJSON},
			want: "the document forbids this request, but the server did not refuse it"},
		{name: "a forbidden request refused", method: "POST", path: "/v1/namespaces/" + testNS + "/functions", token: "t",
			body: `{"name":"Hello","runtime":"python3.11"}`, answer: answer{status: 400, body: envelope("invalid_argument")}},
		{name: "a code the status does not have", method: "POST", path: "/v1/namespaces/" + testNS + "/functions", token: "t",
			body: `{"name":"f","runtime":"python3.11"}`, answer: answer{status: 400, body: envelope("not_found")}, want: "does not match"},
		{name: "no token refused", method: "GET", path: "/v1/namespaces/" + testNS + "/functions",
			answer: answer{status: 401, body: envelope("unauthenticated")}},
		{name: "no token accepted", method: "GET", path: "/v1/namespaces/" + testNS + "/functions",
			answer: answer{status: 200, body: `{"items":[]}`}, want: "did not refuse"},
		{name: "429 without Retry-After", method: "POST", path: "/fn/" + testNS + "/f/x",
			answer: answer{status: 429, body: envelope("throttled")}, want: "Retry-After"},
		{name: "429 with Retry-After", method: "POST", path: "/fn/" + testNS + "/f/x/y",
			answer: answer{status: 429, header: map[string]string{"Retry-After": "1"}, body: envelope("throttled")}},
		{name: "/fn/'s own 503 not the envelope", method: "GET", path: "/fn/" + testNS + "/f",
			answer: answer{status: 503, body: `{"anything":"the function likes"}`}, want: "does not match"},
		{name: "the function's own 503", method: "GET", path: "/fn/" + testNS + "/f",
			answer: answer{viaFn: true}},
		{name: "/fn/'s own 503 after a backend's call", method: "GET", path: "/fn/" + testNS + "/f",
			answer: answer{backendCall: true, status: 503, body: `{"anything":"the function likes"}`}, want: "does not match"},
		{name: "a function with its conditions", method: "GET", path: "/v1/namespaces/" + testNS + "/functions/f", token: "t",
			answer: answer{status: 200, body: strings.Replace(fnJSON, `"replicas":0,`, `"replicas":0,"conditions":[`+
				`{"type":"Built","status":"True","reason":"Built","message":"m","last_transition_time":"2026-12-01T20:00:00Z"},`+
				`{"type":"Ready","status":"False","reason":"Starting","last_transition_time":"2026-12-01T20:00:01Z"}],`, 1)}},
		{name: "a condition of an unknown type", method: "GET", path: "/v1/namespaces/" + testNS + "/functions/f", token: "t",
			answer: answer{status: 200, body: strings.Replace(fnJSON, `"replicas":0,`, `"replicas":0,"conditions":[`+
				`{"type":"Happy","status":"True","reason":"Built","last_transition_time":"2026-12-01T20:00:00Z"}],`, 1)}, want: "Happy"},
		{name: "logs as documented", method: "GET", path: logsPath + "?follow=false&since=5m&tail=2&source=build", token: "t",
			answer: answer{status: 200, header: ndjson, body: logLine + "\n" + logLine + "\n"}},
		{name: "logs: no lines", method: "GET", path: logsPath, token: "t", answer: answer{status: 200, header: ndjson}},
		{name: "logs: a line the schema does not allow", method: "GET", path: logsPath, token: "t",
			answer: answer{status: 200, header: ndjson, body: logLine + "\n" + strings.Replace(logLine, `"stream":"stdout"`, `"stream":"video"`, 1) + "\n"},
			want:   "line 2"},
		{name: "logs: not NDJSON", method: "GET", path: logsPath, token: "t",
			answer: answer{status: 200, header: ndjson, body: "[" + logLine + "]\n"}, want: "do not match"},
		{name: "logs: a tail too long accepted", method: "GET", path: logsPath + "?tail=10001", token: "t",
			answer: answer{status: 200, header: ndjson}, want: "did not refuse"},
		{name: "logs: a source refused", method: "GET", path: logsPath + "?source=pods", token: "t",
			answer: answer{status: 400, body: envelope("invalid_argument")}},
		{name: "logs: none kept here", method: "GET", path: logsPath, token: "t",
			answer: answer{status: 503, body: envelope("not_ready")}},
		{name: "events as documented", method: "GET", path: logsPath[:len(logsPath)-len("logs")] + "events?follow=true", token: "t",
			answer: answer{status: 200, header: ndjson, body: `{"time":"2026-12-01T20:00:00Z","type":"Normal","reason":"Building","message":"m",` +
				`"code_sha256":"` + strings.Repeat("a", 64) + `"}` + "\n"}},
		{name: "an unlisted path answered", method: "GET", path: "/v2/things",
			answer: answer{status: 200, body: `{}`}, want: "must be 404"},
		{name: "an unlisted path refused", method: "GET", path: "/v2/things",
			answer: answer{status: 404, body: envelope("not_found")}},
		{name: "an unlisted method refused", method: "DELETE", path: "/healthz",
			answer: answer{status: 405, body: envelope("method_not_allowed")}},
		{name: "an unlisted method with the wrong code", method: "DELETE", path: "/healthz",
			answer: answer{status: 405, body: envelope("not_found")}, want: "not the 405 envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var reports []string
			report := func(format string, args ...any) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, fmt.Sprintf(format, args...))
			}
			api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if tc.answer.viaFn {
					req, _ := http.NewRequestWithContext(r.Context(), r.Method, fn.URL, nil)
					req.Header.Set("X-Forwarded-Host", r.Host) // as /fn/'s proxy (SetXForwarded)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
					w.Header().Set("X-Request-Id", "r1")
					w.WriteHeader(resp.StatusCode)
					io.Copy(w, resp.Body)
					return
				}
				if tc.answer.backendCall {
					req, _ := http.NewRequestWithContext(r.Context(), "GET", fn.URL, nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Request-Id", "r1")
				for k, v := range tc.answer.header {
					if v == "" {
						w.Header().Del(k)
					} else {
						w.Header().Set(k, v)
					}
				}
				w.WriteHeader(tc.answer.status)
				io.WriteString(w, tc.answer.body)
			})
			counts := &OpenAPICounts{}
			hs := httptest.NewServer(checkOpenAPI(report, counts, api))
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, hs.URL+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			hs.Close() // waits for the check
			mu.Lock()
			defer mu.Unlock()
			switch {
			case tc.want == "" && len(reports) > 0:
				t.Errorf("reported a matching exchange:\n%s", strings.Join(reports, "\n"))
			case tc.want != "" && len(reports) == 0:
				t.Errorf("not reported (want a report naming %q); counts: %s", tc.want, counts)
			case tc.want != "" && !strings.Contains(strings.Join(reports, "\n"), tc.want):
				t.Errorf("the report does not name %q:\n%s", tc.want, strings.Join(reports, "\n"))
			default:
				if len(reports) > 0 {
					t.Logf("reported as it should be:\n%s", strings.Join(reports, "\n"))
				}
			}
		})
	}
}

// GET /openapi.json on a real server needs no token, answers the committed document, and passes
// the check like every other route.
func TestOpenAPIServed(t *testing.T) {
	e := NewEnv(t, Memstore)
	code, _, body := e.Raw("GET", "/openapi.json", "", "", nil)
	if code != http.StatusOK || !bytes.Equal(body, api.OpenAPI()) {
		t.Fatalf("%d %.100s", code, body)
	}
}
