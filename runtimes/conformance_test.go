package runtimes_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/runspec"
)

// server is one runtime server running as a real process (the host's python3 or node), as in the
// image but with FUNCTION_DIR pointing at testdata.
type server struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (s *server) out() string { s.mu.Lock(); defer s.mu.Unlock(); return s.stdout.String() }
func (s *server) errOut() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

type lang struct {
	name, interp, serverFile, dir string
}

var langs = []lang{
	{"python3.11", "python3", "python3.11/server.py", "testdata/python"},
	{"nodejs20", "node", "nodejs20/server.js", "testdata/node"},
}

func interpreter(t *testing.T, l lang) string {
	p, err := exec.LookPath(l.interp)
	if err != nil {
		testenv.Missing(t, l.interp, err)
	}
	return p
}

// command returns the server command with the contract's environment.
func command(t *testing.T, l lang, env ...string) (*exec.Cmd, int) {
	port := testenv.FreePort(t)
	abs, _ := filepath.Abs(l.dir)
	cmd := exec.Command(interpreter(t, l), l.serverFile)
	cmd.Env = append(os.Environ(), "FUNCTION_DIR="+abs, fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1",
		"TERMINATION_LOG="+filepath.Join(t.TempDir(), "termination-log"))
	cmd.Env = append(cmd.Env, env...)
	return cmd, port
}

// start runs a server and waits for its /health. The free port is found by binding and closing,
// so another test process may take it first: then the server exits or someone else answers, and
// start tries again with a new port.
func start(t *testing.T, l lang, env ...string) *server {
	t.Helper()
	var last string
	for attempt := 0; attempt < 5; attempt++ {
		s, ok, why := tryStart(t, l, env...)
		if ok {
			return s
		}
		last = why
	}
	t.Fatalf("server did not start: %s", last)
	return nil
}

func tryStart(t *testing.T, l lang, env ...string) (*server, bool, string) {
	t.Helper()
	cmd, port := command(t, l, env...)
	s := &server{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	cmd.Stdout = lockedWriter{&s.mu, &s.stdout}
	cmd.Stderr = lockedWriter{&s.mu, &s.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(s.done) }()
	stop := func() { cmd.Process.Kill(); <-s.done }
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			if strings.Contains(s.errOut(), "in use") {
				return nil, false, s.errOut()
			}
			t.Fatalf("server exited at start: %s", s.errOut())
		default:
		}
		if resp, err := http.Get(s.url + "/health"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
				stop() // another process has the port
				return nil, false, fmt.Sprintf("port %d answered %d %s", port, resp.StatusCode, body)
			}
			t.Cleanup(stop)
			return s, true, ""
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	return nil, false, "not healthy within 15 s: " + s.errOut()
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, ctype string, body []byte) response {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("X-Test", "v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

func jsonOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %q", b)
	}
	return m
}

func errorCode(t *testing.T, b []byte) (string, string) {
	m := jsonOf(t, b)
	e, _ := m["error"].(map[string]any)
	code, _ := e["code"].(string)
	msg, _ := e["message"].(string)
	return code, msg
}

// variants are the handler shapes each runtime must serve alike.
func variants() []struct {
	lang    lang
	handler string
	slow    bool // whether /slow can run without blocking the server
} {
	return []struct {
		lang    lang
		handler string
		slow    bool
	}{
		{langs[0], "handler.handle", true},
		{langs[0], "handler.handle_async", true},
		{langs[1], "handler.handle", true},
		{langs[1], "handler.handleSync", false},
	}
}

func TestConformance(t *testing.T) {
	for _, v := range variants() {
		v := v
		t.Run(v.lang.name+"/"+v.handler, func(t *testing.T) {
			t.Parallel()
			s := start(t, v.lang, "HANDLER="+v.handler, "TIMEOUT_SEC=1", "MAX_BODY_BYTES=4096")

			t.Run("JSON echo", func(t *testing.T) {
				r := do(t, "POST", s.url+"/echo?x=1&x=2&y=", "application/json", []byte(`{"a":1,"b":[true,null]}`))
				if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
					t.Fatalf("%d %s %s", r.status, r.header.Get("Content-Type"), r.body)
				}
				ev := jsonOf(t, r.body)["event"].(map[string]any)
				q, _ := json.Marshal(ev["query"])
				b, _ := json.Marshal(ev["body"])
				if ev["method"] != "POST" || ev["path"] != "/echo" || string(q) != `{"x":["1","2"],"y":[""]}` ||
					string(b) != `{"a":1,"b":[true,null]}` || ev["is_base64_encoded"] != false {
					t.Errorf("event %v (query %s body %s)", ev, q, b)
				}
				if h, _ := ev["headers"].(map[string]any); h["x-test"] != "v" || h["content-type"] != "application/json" {
					t.Errorf("headers %v: want lower-case names", ev["headers"])
				}
			})
			t.Run("text and binary bodies", func(t *testing.T) {
				ev := jsonOf(t, do(t, "PUT", s.url+"/echo", "text/plain", []byte("hello\nworld")).body)["event"].(map[string]any)
				if ev["body"] != "hello\nworld" || ev["is_base64_encoded"] != false || ev["method"] != "PUT" {
					t.Errorf("text: %v", ev)
				}
				ev = jsonOf(t, do(t, "POST", s.url+"/echo", "application/octet-stream", []byte{0xff, 0x00, 0xfe}).body)["event"].(map[string]any)
				if ev["body"] != "/wD+" || ev["is_base64_encoded"] != true {
					t.Errorf("binary: %v", ev)
				}
				ev = jsonOf(t, do(t, "POST", s.url+"/echo", "application/json", []byte("{not json")).body)["event"].(map[string]any)
				if ev["body"] != "{not json" {
					t.Errorf("invalid JSON should stay text: %v", ev)
				}
				ev = jsonOf(t, do(t, "GET", s.url+"/echo", "", nil).body)["event"].(map[string]any)
				if ev["body"] != nil {
					t.Errorf("no body: %v", ev["body"])
				}
			})
			t.Run("statusCode passthrough", func(t *testing.T) {
				r := do(t, "GET", s.url+"/status", "", nil)
				if r.status != 201 || r.header.Get("X-Custom") != "yes" || string(r.body) != "created" || r.header.Get("Content-Type") != "text/plain" {
					t.Errorf("%d %v %q", r.status, r.header, r.body)
				}
				r = do(t, "GET", s.url+"/binary", "", nil)
				if r.status != 200 || !bytes.Equal(r.body, []byte{0, 1, 2, 0xff}) {
					t.Errorf("base64 body: %d %v", r.status, r.body)
				}
			})
			t.Run("204 and text", func(t *testing.T) {
				if r := do(t, "DELETE", s.url+"/none", "", nil); r.status != 204 || len(r.body) != 0 {
					t.Errorf("none: %d %q", r.status, r.body)
				}
				r := do(t, "GET", s.url+"/text", "", nil)
				if r.status != 200 || string(r.body) != "plain text" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
					t.Errorf("text: %d %q %s", r.status, r.body, r.header.Get("Content-Type"))
				}
			})
			t.Run("exception then next request", func(t *testing.T) {
				r := do(t, "GET", s.url+"/raise", "", nil)
				code, msg := errorCode(t, r.body)
				if r.status != 500 || code != "handler_error" || !strings.Contains(msg, "boom") {
					t.Errorf("%d %s", r.status, r.body)
				}
				if r := do(t, "GET", s.url+"/text", "", nil); r.status != 200 {
					t.Errorf("after an exception: %d", r.status)
				}
				if !strings.Contains(s.errOut(), "boom") {
					t.Errorf("stderr lacks the traceback: %s", s.errOut())
				}
			})
			// A handler cannot inject headers or split the response: CR/LF in a value, or a name
			// that is not a token, is an invalid result (500), and the server goes on.
			t.Run("header injection refused", func(t *testing.T) {
				for _, path := range []string{"/crlf", "/badname"} {
					r := do(t, "GET", s.url+path, "", nil)
					if code, msg := errorCode(t, r.body); r.status != 500 || code != "handler_error" || !strings.Contains(msg, "header") ||
						r.header.Get("Set-Cookie") != "" {
						t.Errorf("%s: %d %v %s", path, r.status, r.header, r.body)
					}
				}
				if r := do(t, "GET", s.url+"/text", "", nil); r.status != 200 {
					t.Errorf("after a refused result: %d", r.status)
				}
			})
			// A negative chunk size must not make the server read until the client closes.
			t.Run("negative chunk size", func(t *testing.T) {
				c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n")
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("negative chunk size: %d, want 400", resp.StatusCode)
				}
			})
			t.Run("oversize body", func(t *testing.T) {
				r := do(t, "POST", s.url+"/echo", "text/plain", bytes.Repeat([]byte("x"), 5000))
				if code, _ := errorCode(t, r.body); r.status != 413 || code != "payload_too_large" {
					t.Errorf("%d %s", r.status, r.body)
				}
			})
			t.Run("log line per request", func(t *testing.T) {
				do(t, "GET", s.url+"/text?q=1", "", nil)
				// The line may be written just after the answer: wait for it (bounded), not a guess.
				logged := func() bool {
					for _, line := range strings.Split(s.out(), "\n") {
						var l map[string]any
						if json.Unmarshal([]byte(line), &l) == nil && l["path"] == "/text" && l["method"] == "GET" && l["status"] == float64(200) {
							if _, ok := l["duration_ms"].(float64); ok {
								return true
							}
						}
					}
					return false
				}
				if !waitUntil(2*time.Second, logged) {
					t.Errorf("no JSON log line for GET /text in stdout:\n%s", s.out())
				}
			})
			if !v.slow {
				return
			}
			t.Run("timeout", func(t *testing.T) {
				start := time.Now()
				r := do(t, "GET", s.url+"/slow?s=3", "", nil)
				if code, _ := errorCode(t, r.body); r.status != 504 || code != "timeout" {
					t.Errorf("%d %s", r.status, r.body)
				}
				if d := time.Since(start); d > 2500*time.Millisecond {
					t.Errorf("504 came after %v; TIMEOUT_SEC=1", d)
				}
				if r := do(t, "GET", s.url+"/text", "", nil); r.status != 200 {
					t.Errorf("after a timeout: %d", r.status)
				}
			})
			t.Run("20 concurrent requests", func(t *testing.T) {
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan string, 20)
				for i := 0; i < 20; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := http.Get(s.url + "/slow?s=0.5")
						if err != nil {
							errs <- err.Error()
							return
						}
						resp.Body.Close()
						if resp.StatusCode != 200 {
							errs <- resp.Status
						}
					}()
				}
				wg.Wait()
				close(errs)
				for e := range errs {
					t.Error(e)
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("20 × 0.5 s requests took %v: not served concurrently", d)
				}
			})
		})
	}
}

func TestESMHandler(t *testing.T) {
	s := start(t, langs[1], "HANDLER=esm.handle")
	r := do(t, "GET", s.url+"/x", "", nil)
	if m := jsonOf(t, r.body); r.status != 200 || m["esm"] != true {
		t.Errorf("%d %s", r.status, r.body)
	}
}

func TestLoadFailures(t *testing.T) {
	for _, l := range langs {
		for _, tc := range []struct{ handler, want string }{
			{"missing.handle", "missing"},
			{"broken.handle", "broken"},
			{"handler.nope", "nope"},
			{"nodots", "HANDLER"},
		} {
			t.Run(l.name+"/"+tc.handler, func(t *testing.T) {
				cmd, _ := command(t, l, "HANDLER="+tc.handler)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				var ee *exec.ExitError
				if err == nil || !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("exit %v, want non-zero; stderr: %s", err, stderr.String())
				}
				if !strings.Contains(stderr.String(), "sless: ") || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("stderr does not name %q:\n%s", tc.want, stderr.String())
				}
			})
		}
	}
}

func TestJobMode(t *testing.T) {
	for _, l := range langs {
		fail := "handler.job_fail"
		if l.interp == "node" {
			fail = "handler.jobFail"
		}
		t.Run(l.name+"/result", func(t *testing.T) {
			cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER=handler.job", `EVENT_JSON={"input":[100,200,300]}`)
			tl := filepath.Join(t.TempDir(), "termination-log")
			os.WriteFile(tl, nil, 0o644)
			cmd.Env = append(cmd.Env, "TERMINATION_LOG="+tl)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			last := lines[len(lines)-1]
			if m := jsonOf(t, []byte(last)); m["sum"] != float64(600) {
				t.Errorf("last stdout line %q, want {\"sum\": 600}", last)
			}
			if b, _ := os.ReadFile(tl); jsonOf(t, b)["sum"] != float64(600) {
				t.Errorf("termination log %q", b)
			}
		})
		t.Run(l.name+"/failure", func(t *testing.T) {
			cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER="+fail, `EVENT_JSON={}`)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1", err)
			}
			if !strings.Contains(stderr.String(), "job failed on purpose") {
				t.Errorf("stderr: %s", stderr.String())
			}
		})
		// A cron run on Kubernetes gets the name of its Job, which the CronJob controller derives from
		// the scheduled time; the runtime fills scheduled_time from it (runspec.EnvCronJob).
		t.Run(l.name+"/cron scheduled_time from the Job's name", func(t *testing.T) {
			echo := "handler.echo_event"
			if l.interp == "node" {
				echo = "handler.echoEvent"
			}
			at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
			for _, tc := range []struct{ event, job, want string }{
				{runspec.CronEvent("nightly", time.Time{}), fmt.Sprintf("cron-nightly-%d", at.Unix()/60), at.Format(time.RFC3339)},
				{runspec.CronEvent("nightly", at.Add(time.Hour)), fmt.Sprintf("cron-nightly-%d", at.Unix()/60), at.Add(time.Hour).Format(time.RFC3339)},
				{runspec.CronEvent("nightly", time.Time{}), "not-a-cron-job", ""},
				{`{"source":"api","x":1}`, fmt.Sprintf("cron-nightly-%d", at.Unix()/60), ""},
			} {
				cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER="+echo, "EVENT_JSON="+tc.event, runspec.EnvCronJob+"="+tc.job)
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				got, _ := jsonOf(t, []byte(lines[len(lines)-1]))["scheduled_time"].(string)
				if got != tc.want {
					t.Errorf("event %s, job %s: scheduled_time %q, want %q", tc.event, tc.job, got, tc.want)
				}
				if want, _ := runspec.ScheduledTimeOfJob(tc.job); tc.want != "" && tc.event == runspec.CronEvent("nightly", time.Time{}) && want.Format(time.RFC3339) != got {
					t.Errorf("the runtime and runspec.ScheduledTimeOfJob disagree: %s vs %s", got, want.Format(time.RFC3339))
				}
			}
		})
		// The single host hands over the user's variables and the event in a file, not on podman's
		// command line: the runtime loads them before anything else (a multi-line value too).
		t.Run(l.name+"/variables and the event from SLESS_ENV_FILE", func(t *testing.T) {
			echo := "handler.echo_event"
			if l.interp == "node" {
				echo = "handler.echoEvent"
			}
			file := filepath.Join(t.TempDir(), "env.json")
			pem := "-----BEGIN KEY-----\nabc\n-----END KEY-----"
			b, _ := json.Marshal(map[string]string{"EVENT_JSON": `{"from":"file","pem":` + strconv.Quote(pem) + `}`, "SECRET_PEM": pem})
			os.WriteFile(file, b, 0o400)
			cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER="+echo, runspec.EnvFile+"="+file)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if ev := jsonOf(t, []byte(lines[len(lines)-1])); ev["from"] != "file" || ev["pem"] != pem {
				t.Errorf("event %v", ev)
			}
			bad, _ := command(t, l, "JOB_MODE=1", "HANDLER="+echo, runspec.EnvFile+"="+filepath.Join(t.TempDir(), "missing.json"))
			if err := bad.Run(); err == nil {
				t.Error("a missing SLESS_ENV_FILE was ignored")
			}
		})
		t.Run(l.name+"/bad EVENT_JSON", func(t *testing.T) {
			cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER=handler.job", `EVENT_JSON={oops`)
			if err := cmd.Run(); err == nil {
				t.Fatal("exit 0 for invalid EVENT_JSON")
			}
		})
	}
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func TestSIGTERMFinishesInFlight(t *testing.T) {
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			s := start(t, l, "HANDLER=handler.handle", "GRACE_SEC=10")
			type result struct {
				status int
				err    error
			}
			got := make(chan result, 1)
			go func() {
				resp, err := http.Get(s.url + "/slow?s=1")
				if err != nil {
					got <- result{0, err}
					return
				}
				resp.Body.Close()
				got <- result{resp.StatusCode, nil}
			}()
			// The handler says when it runs: SIGTERM comes with the request in flight.
			if !waitUntil(5*time.Second, func() bool { return strings.Contains(s.errOut(), "slow: started") }) {
				t.Fatalf("the request never reached the handler: %s", s.errOut())
			}
			if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil || r.status != 200 {
				t.Fatalf("in-flight request: %d %v", r.status, r.err)
			}
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				t.Fatal("server did not exit after SIGTERM")
			}
			if code := s.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
		})
	}
}
