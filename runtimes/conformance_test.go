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

// server is one runtime server running as a real process (on its runtime's interpreter), as in the
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

// lang is one runtime the suite runs on its real interpreter: python3.11 and nodejs20 on the
// host's python3 and node, the others on their base image's (hack/build-bases.sh): node 22 and 24
// run on the host as they are, python3.13 needs trixie's libc and runs chrooted into its base's
// root filesystem (as root). Each interpreter's version is checked before it is used.
type lang struct {
	name     string // the runtime
	language string // "python" or "node": its server and testdata
	host     string // the host's interpreter, when it is this runtime's; "" for the base's
}

var langs = []lang{
	{"python3.11", "python", "python3"},
	{"python3.13", "python", ""},
	{"nodejs20", "node", "node"},
	{"nodejs22", "node", ""},
	{"nodejs24", "node", ""},
}

func (l lang) serverFile() string {
	if l.language == "python" {
		return "python/server.py"
	}
	return "node/server.js"
}

// interp is how a runtime's interpreter runs here.
type interp struct {
	path string   // the interpreter; inside root when root is set
	root string   // chroot into this directory first
	env  []string // the base image's environment, under chroot
}

var (
	checkedMu sync.Mutex
	// checked are the interpreters that reported their runtime's version, by runtime: the path
	// each reported for itself (a host's python3 may be a pyenv shim, a script that costs a
	// second per start on a loaded machine; the interpreter it runs does not).
	checked = map[string]string{}
)

func interpreter(t *testing.T, l lang) interp {
	t.Helper()
	var in interp
	switch {
	case l.host != "":
		p, err := exec.LookPath(l.host)
		if err != nil {
			testenv.Missing(t, l.host, err)
		}
		in.path = p
	case l.language == "node":
		in.path = filepath.Join(testenv.BaseRootfs(t, l.name).Dir, "usr", "local", "bin", "node")
	default:
		if os.Geteuid() != 0 {
			testenv.Missing(t, "root, to chroot into the "+l.name+" base (its python3 needs the base's libc)", fmt.Errorf("euid %d", os.Geteuid()))
		}
		fs := testenv.BaseRootfs(t, l.name)
		in = interp{path: "/usr/bin/python3", root: fs.Dir, env: fs.Env}
	}
	checkedMu.Lock()
	defer checkedMu.Unlock()
	if p, ok := checked[l.name]; ok {
		in.path = p
		return in
	}
	prog := []string{"-c", `import sys; print("python%d.%d" % sys.version_info[:2]); print(sys.executable)`}
	if l.language == "node" {
		prog = []string{"-e", `console.log("nodejs" + process.versions.node.split(".")[0]); console.log(process.execPath)`}
	}
	out, err := in.command(prog...).CombinedOutput()
	got, self, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || got != l.name || !filepath.IsAbs(self) {
		if l.host != "" {
			testenv.Missing(t, "a "+l.name+" interpreter ("+l.host+" is "+got+")", err)
		}
		t.Fatalf("the %s interpreter %s reports %q (%v)", l.name, in.path, out, err)
	}
	checked[l.name], in.path = self, self
	return in
}

func (in interp) command(args ...string) *exec.Cmd {
	cmd := exec.Command(in.path, args...)
	if in.root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: in.root}
		cmd.Dir = "/"
		cmd.Env = append([]string{}, in.env...)
	} else {
		cmd.Env = os.Environ()
	}
	return cmd
}

// place is a directory the server process sees at inner (under chroot) and the test at host.
type place struct{ host, inner string }

// scratch is a new empty directory the interpreter of l can reach, removed when the test ends.
func scratch(t *testing.T, in interp) place {
	t.Helper()
	if in.root == "" {
		d := t.TempDir()
		return place{d, d}
	}
	d, err := os.MkdirTemp(filepath.Join(in.root, "tmp"), "sless-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return place{d, "/tmp/" + filepath.Base(d)}
}

// command returns the server command with the contract's environment. Under chroot the server
// and the testdata are copied into the root first.
func command(t *testing.T, l lang, env ...string) (*exec.Cmd, int) {
	t.Helper()
	in := interpreter(t, l)
	port := testenv.FreePort(t)
	server, _ := filepath.Abs(l.serverFile())
	fnDir, _ := filepath.Abs(filepath.Join("testdata", l.language))
	if in.root != "" {
		w := scratch(t, in)
		b, err := os.ReadFile(server)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.host, filepath.Base(server)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(w.host, "function"), os.DirFS(fnDir)); err != nil {
			t.Fatal(err)
		}
		server, fnDir = w.inner+"/"+filepath.Base(server), w.inner+"/function"
	}
	cmd := in.command(server)
	cmd.Env = append(cmd.Env, "FUNCTION_DIR="+fnDir, fmt.Sprintf("PORT=%d", port), "HOST=127.0.0.1",
		"TERMINATION_LOG="+scratch(t, in).inner+"/termination-log")
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

// variant is one handler shape on one runtime: each runtime must serve every shape of its language
// alike.
type variant struct {
	lang    lang
	handler string
	slow    bool // whether /slow can run without blocking the server
}

func variants() []variant {
	var out []variant
	for _, l := range langs {
		if l.language == "python" {
			out = append(out, variant{l, "handler.handle", true}, variant{l, "handler.handle_async", true})
		} else {
			out = append(out, variant{l, "handler.handle", true}, variant{l, "handler.handleSync", false})
		}
	}
	return out
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
	for _, l := range langs {
		if l.language != "node" {
			continue
		}
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, l, "HANDLER=esm.handle")
			r := do(t, "GET", s.url+"/x", "", nil)
			if m := jsonOf(t, r.body); r.status != 200 || m["esm"] != true {
				t.Errorf("%d %s", r.status, r.body)
			}
		})
	}
}

func TestLoadFailures(t *testing.T) {
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			testLoadFailures(t, l)
		})
	}
}

func testLoadFailures(t *testing.T, l lang) {
	for _, tc := range []struct{ handler, want string }{
		{"missing.handle", "missing"},
		{"broken.handle", "broken"},
		{"handler.nope", "nope"},
		{"nodots", "HANDLER"},
	} {
		t.Run(tc.handler, func(t *testing.T) {
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

func TestJobMode(t *testing.T) {
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			testJobMode(t, l)
		})
	}
}

func testJobMode(t *testing.T, l lang) {
	fail := "handler.job_fail"
	if l.language == "node" {
		fail = "handler.jobFail"
	}
	t.Run("result", func(t *testing.T) {
		cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER=handler.job", `EVENT_JSON={"input":[100,200,300]}`)
		dir := scratch(t, interpreter(t, l))
		tl := filepath.Join(dir.host, "termination-log")
		os.WriteFile(tl, nil, 0o644)
		cmd.Env = append(cmd.Env, "TERMINATION_LOG="+dir.inner+"/termination-log")
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
	t.Run("failure", func(t *testing.T) {
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
	t.Run("cron scheduled_time from the Job's name", func(t *testing.T) {
		echo := "handler.echo_event"
		if l.language == "node" {
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
	t.Run("variables and the event from SLESS_ENV_FILE", func(t *testing.T) {
		echo := "handler.echo_event"
		if l.language == "node" {
			echo = "handler.echoEvent"
		}
		dir := scratch(t, interpreter(t, l))
		file := filepath.Join(dir.host, "env.json")
		pem := "-----BEGIN KEY-----\nabc\n-----END KEY-----"
		b, _ := json.Marshal(map[string]string{"EVENT_JSON": `{"from":"file","pem":` + strconv.Quote(pem) + `}`, "SECRET_PEM": pem})
		os.WriteFile(file, b, 0o400)
		cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER="+echo, runspec.EnvFile+"="+dir.inner+"/env.json")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if ev := jsonOf(t, []byte(lines[len(lines)-1])); ev["from"] != "file" || ev["pem"] != pem {
			t.Errorf("event %v", ev)
		}
		bad, _ := command(t, l, "JOB_MODE=1", "HANDLER="+echo, runspec.EnvFile+"="+dir.inner+"/missing.json")
		if err := bad.Run(); err == nil {
			t.Error("a missing SLESS_ENV_FILE was ignored")
		}
	})
	t.Run("bad EVENT_JSON", func(t *testing.T) {
		cmd, _ := command(t, l, "JOB_MODE=1", "HANDLER=handler.job", `EVENT_JSON={oops`)
		if err := cmd.Run(); err == nil {
			t.Fatal("exit 0 for invalid EVENT_JSON")
		}
	})
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
			t.Parallel()
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

// streamHandlers are the streaming shapes each language serves alike (testdata/*/stream.*):
// python generators from a sync handler, async generators from an async one, an async generator
// function as the handler itself (/yield only); node async generators, web ReadableStreams and
// Node Readables.
var streamHandlers = map[string][]struct {
	handler string
	only    string // the one case it serves, "" for all
}{
	"python": {{"stream.handle", ""}, {"stream.handle_async", ""}, {"stream.agen", "first chunk before the handler ends"}},
	"node":   {{"stream.handle", ""}, {"stream.handleWeb", ""}, {"stream.handleReadable", ""}},
}

// language is "python" or "node": every runtime of langs runs its language's cases.
func language(l lang) string {
	if strings.HasPrefix(l.name, "python") {
		return "python"
	}
	return "node"
}

// streamGet starts GET url and returns the response once its headers are in, and when the
// request was sent.
func streamGet(t *testing.T, url string) (*http.Response, time.Time) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(c.CloseIdleConnections)
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, start
}

// logLine is the server's JSON log line for path with a "stream" field (waiting for it: it is
// written when the stream ends).
func logLine(t *testing.T, s *server, path string) map[string]any {
	t.Helper()
	var found map[string]any
	waitUntil(5*time.Second, func() bool {
		for _, line := range strings.Split(s.out(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["path"] == path && l["stream"] != nil {
				found = l
				return true
			}
		}
		return false
	})
	if found == nil {
		t.Fatalf("no log line with \"stream\" for %s in stdout:\n%s", path, s.out())
	}
	return found
}

// TestStreaming: a handler that returns a generator, an async iterable or a stream is answered
// chunk by chunk as it yields (runtimes/README.md "Streaming"), on both languages as real
// processes.
func TestStreaming(t *testing.T) {
	for _, l := range langs {
		for _, h := range streamHandlers[language(l)] {
			t.Run(l.name+"/"+h.handler, func(t *testing.T) {
				t.Parallel()
				s := start(t, l, "HANDLER="+h.handler, "TIMEOUT_SEC=2")
				run := func(name string, f func(t *testing.T)) {
					if h.only == "" || h.only == name {
						t.Run(name, f)
					}
				}
				// The first chunk comes while the handler sleeps 1 s before its second.
				run("first chunk before the handler ends", func(t *testing.T) {
					resp, start := streamGet(t, s.url+"/yield")
					defer resp.Body.Close()
					br := bufio.NewReader(resp.Body)
					first, err := br.ReadString('\n')
					firstAt := time.Since(start)
					if err != nil || first != "first\n" {
						t.Fatalf("first chunk %q, %v", first, err)
					}
					rest, err := io.ReadAll(br)
					all := time.Since(start)
					if err != nil || string(rest) != "second\n" {
						t.Fatalf("rest %q, %v", rest, err)
					}
					t.Logf("first chunk after %v, the whole body after %v", firstAt, all)
					if firstAt > 300*time.Millisecond || all < 900*time.Millisecond {
						t.Errorf("first chunk after %v (want < 300 ms), whole body after %v (the handler sleeps 1 s)", firstAt, all)
					}
					if resp.StatusCode != 200 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" ||
						resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
						t.Errorf("%d %v %v", resp.StatusCode, resp.TransferEncoding, resp.Header)
					}
					// One log line, when the stream ended, timing all of it.
					if l := logLine(t, s, "/yield"); l["stream"] != "complete" || l["status"] != float64(200) || l["duration_ms"].(float64) < 900 {
						t.Errorf("log line %v", l)
					}
				})
				run("chunk types", func(t *testing.T) {
					resp, _ := streamGet(t, s.url+"/types")
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					lines := strings.Split(string(b), "\n")
					if err != nil || len(lines) != 5 || lines[0] != "str" || lines[1] != "bytes" || lines[3] != "end" || lines[4] != "" {
						t.Fatalf("body %q, %v", b, err)
					}
					if m := jsonOf(t, []byte(lines[2])); m["k"] != float64(1) {
						t.Errorf("a dict chunk should be a JSON line: %q", lines[2])
					}
				})
				run("server-sent events with statusCode and headers", func(t *testing.T) {
					resp, start := streamGet(t, s.url+"/sse")
					defer resp.Body.Close()
					if resp.StatusCode != 201 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Custom") != "yes" {
						t.Fatalf("%d %v", resp.StatusCode, resp.Header)
					}
					br := bufio.NewReader(resp.Body)
					var events []string
					var firstAt time.Duration
					for {
						line, err := br.ReadString('\n')
						if err == io.EOF && line == "" {
							break
						}
						if err != nil {
							t.Fatalf("after %v: %v", events, err)
						}
						if strings.HasPrefix(line, "data: ") {
							if len(events) == 0 {
								firstAt = time.Since(start)
							}
							events = append(events, strings.TrimSpace(strings.TrimPrefix(line, "data: ")))
						}
					}
					if strings.Join(events, ",") != "0,1" || firstAt > 300*time.Millisecond {
						t.Errorf("events %v, the first after %v", events, firstAt)
					}
				})
				// TIMEOUT_SEC=2 ends a stream that would go on forever: after its last complete
				// chunk, cleanly; the handler's generator is closed.
				run("timeout mid-stream", func(t *testing.T) {
					// Where the server (chrooted for python3.13) writes it, and where the test reads it.
					p := scratch(t, interpreter(t, l))
					marker := filepath.Join(p.host, "closed")
					resp, start := streamGet(t, s.url+"/forever?marker="+p.inner+"/closed")
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					d := time.Since(start)
					if err != nil || !strings.HasPrefix(string(b), "first\ntick\n") || strings.Trim(strings.TrimPrefix(string(b), "first\n"), "tick\n") != "" ||
						!strings.HasSuffix(string(b), "\n") {
						t.Errorf("body %q, %v: want whole chunks, then a clean end", b, err)
					}
					if d < 1900*time.Millisecond || d > 3500*time.Millisecond {
						t.Errorf("the stream ended after %v; TIMEOUT_SEC=2", d)
					}
					if l := logLine(t, s, "/forever"); l["stream"] != "timeout" || l["duration_ms"].(float64) < 1900 {
						t.Errorf("log line %v", l)
					}
					if !waitUntil(5*time.Second, func() bool { _, err := os.Stat(marker); return err == nil }) {
						t.Errorf("the handler's generator was not closed after the timeout")
					}
				})
				// An exception once the headers are out: the response is cut (no terminating
				// chunk), the traceback logged, the server goes on.
				run("exception mid-stream", func(t *testing.T) {
					resp, _ := streamGet(t, s.url+"/raise")
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(b) != "first\n" || !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Errorf("body %q, %v: want the first chunk, then an incomplete body", b, err)
					}
					if !waitUntil(5*time.Second, func() bool { return strings.Contains(s.errOut(), "midstream boom") }) {
						t.Errorf("stderr lacks the traceback: %s", s.errOut())
					}
					if l := logLine(t, s, "/raise"); l["stream"] != "error" {
						t.Errorf("log line %v", l)
					}
					if r := do(t, "GET", s.url+"/text", "", nil); r.status != 200 || string(r.body) != "ok" {
						t.Errorf("after an exception mid-stream: %d %q", r.status, r.body)
					}
				})
				// The client goes after the first chunk: the handler's generator is closed (its
				// finally writes the marker) long before the timeout, and the server goes on.
				run("client disconnect closes the handler's generator", func(t *testing.T) {
					// Where the server (chrooted for python3.13) writes it, and where the test reads it.
					p := scratch(t, interpreter(t, l))
					marker := filepath.Join(p.host, "closed")
					resp, _ := streamGet(t, s.url+"/disconnect?marker="+p.inner+"/closed")
					first, err := bufio.NewReader(resp.Body).ReadString('\n')
					if err != nil || first != "first\n" {
						t.Fatalf("first chunk %q, %v", first, err)
					}
					resp.Body.Close() // unread: closes the connection
					closed := time.Now()
					var how []byte
					if !waitUntil(5*time.Second, func() bool { how, err = os.ReadFile(marker); return err == nil }) {
						t.Fatalf("the handler never saw the client go (no marker)\nstdout:\n%s\nstderr:\n%s", s.out(), s.errOut())
					}
					t.Logf("the handler saw the close %v after the client went: %s", time.Since(closed), how)
					if d := time.Since(closed); d > 1500*time.Millisecond {
						t.Errorf("the handler saw the close only after %v", d)
					}
					if string(how) == "finished" {
						t.Errorf("the generator finished instead of being closed")
					}
					if l := logLine(t, s, "/disconnect"); l["stream"] != "client_closed" || l["duration_ms"].(float64) > 1900 {
						t.Errorf("log line %v", l)
					}
					if r := do(t, "GET", s.url+"/text", "", nil); r.status != 200 || string(r.body) != "ok" {
						t.Errorf("after a client went mid-stream: %d %q", r.status, r.body)
					}
				})
				// Clients that go mid-stream, one after another, leave nothing behind in the
				// server: its threads and open files are what they were after the first few.
				run("repeated disconnects leak no thread or file", func(t *testing.T) {
					p := scratch(t, interpreter(t, l))
					usage := func() (threads, fds int) {
						pid := strconv.Itoa(s.cmd.Process.Pid)
						st, _ := os.ReadFile("/proc/" + pid + "/status")
						for _, line := range strings.Split(string(st), "\n") {
							if v, ok := strings.CutPrefix(line, "Threads:"); ok {
								threads, _ = strconv.Atoi(strings.TrimSpace(v))
							}
						}
						ents, _ := os.ReadDir("/proc/" + pid + "/fd")
						return threads, len(ents)
					}
					goAway := func(i int) {
						name := fmt.Sprintf("closed-%d", i)
						resp, _ := streamGet(t, s.url+"/disconnect?marker="+p.inner+"/"+name)
						if first, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || first != "first\n" {
							t.Fatalf("first chunk %q, %v", first, err)
						}
						resp.Body.Close()
						if !waitUntil(5*time.Second, func() bool { _, err := os.Stat(filepath.Join(p.host, name)); return err == nil }) {
							t.Fatalf("disconnect %d: the handler never saw the client go", i)
						}
					}
					for i := range 3 { // the server's pools reach their size
						goAway(i)
					}
					threads, fds := usage()
					for i := 3; i < 23; i++ {
						goAway(i)
					}
					// A closed generator's thread or socket may take a moment to go.
					var t2, f2 int
					waitUntil(3*time.Second, func() bool { t2, f2 = usage(); return t2 <= threads+1 && f2 <= fds+1 })
					t.Logf("after 3 disconnects: %d threads, %d files; after 23: %d threads, %d files", threads, fds, t2, f2)
					if threads == 0 || t2 > threads+1 || f2 > fds+1 {
						t.Errorf("20 more clients that went mid-stream: threads %d → %d, open files %d → %d", threads, t2, fds, f2)
					}
				})
			})
		}
	}
}
