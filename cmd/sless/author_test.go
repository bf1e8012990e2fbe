package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// cli runs the built sless binary as one user: its own HOME and XDG_CONFIG_HOME, and
// SLESS_ENDPOINT / SLESS_API_TOKEN only when a test sets them.
type cli struct {
	t   *testing.T
	env []string
}

func newCLI(t *testing.T, extra ...string) *cli {
	return &cli{t: t, env: append([]string{"HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir(), "SLESS_ENDPOINT=", "SLESS_API_TOKEN="}, extra...)}
}

func (c *cli) with(extra ...string) *cli {
	return &cli{t: c.t, env: append(append([]string{}, c.env...), extra...)}
}

func (c *cli) configFile() string {
	for i := len(c.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.env[i], "XDG_CONFIG_HOME="); ok {
			return filepath.Join(v, "sless", "config.yaml")
		}
	}
	c.t.Fatal("no XDG_CONFIG_HOME")
	return ""
}

func (c *cli) run(args ...string) result { return c.runIn("", args...) }

func (c *cli) runIn(stdin string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, slessBin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return result{code, o.String(), e.String()}
}

// started is a command left running (sless logs -f).
type started struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
}

// start runs a command in the background; the test's end stops it.
func (c *cli) start(args ...string) *started {
	c.t.Helper()
	s := &started{cmd: exec.Command(slessBin, args...), done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), c.env...)
	s.cmd.Stdout, s.cmd.Stderr = &s.stdout, &s.stderr
	if err := s.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	c.t.Cleanup(func() { s.cmd.Process.Kill(); <-s.done })
	return s
}

// interrupt sends SIGINT (Ctrl-C) and returns the exit status.
func (s *started) interrupt(t *testing.T) int {
	t.Helper()
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not end after SIGINT", s.cmd.Args)
	}
	return s.cmd.ProcessState.ExitCode()
}

// syncBuffer is a bytes.Buffer a running command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ok runs a command that must succeed.
func (c *cli) ok(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("sless %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// fails runs a command that must exit non-zero with every want in its stderr.
func (c *cli) fails(args []string, want ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code == 0 {
		c.t.Errorf("sless %s succeeded:\n%s", strings.Join(args, " "), r.stdout)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			c.t.Errorf("sless %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, r.stderr)
		}
	}
	return r
}

const cliHandler = `import os
import sys

V = 1

def handle(event):
    print("handled", event.get("path"), flush=True)  # for sless logs
    if event.get("path") == "/hostile":  # terminal controls: title, clear, CR, 8-bit CSI, DCS
        sys.stdout.buffer.write(b"\x1b]0;pwned\x07\x1b[2Jhostile-marker\rX\xc2\x9b31mY\x1bPq\x1b\\\n")
        sys.stdout.flush()
    if "input" in event:  # a job's event
        return {"sum": sum(event["input"])}
    if "boom" in event:
        raise ValueError("boom requested")
    if event.get("path") == "/teapot":
        return {"statusCode": 418, "body": "short and stout"}
    return {"v": V, "method": event["method"], "path": event["path"], "query": event["query"],
            "body": event["body"], "greeting": os.environ.get("GREETING")}
`

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type answer struct {
	V        int                 `json:"v"`
	Method   string              `json:"method"`
	Path     string              `json:"path"`
	Query    map[string][]string `json:"query"`
	Body     any                 `json:"body"`
	Greeting string              `json:"greeting"`
}

func decodeAnswer(t *testing.T, s string) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		t.Fatalf("answer %q: %v", s, err)
	}
	return a
}

// The author commands against a real `sless up`: login, env-only use, deploy to Ready, invoke,
// fn ls/get/rm, a failing deploy, triggers, jobs and the API's errors.
func TestAuthorCLI(t *testing.T) {
	u := testenv.StartSlessUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	user := newCLI(t) // logs in below
	envOnly := newCLI(t, "SLESS_ENDPOINT="+u.URL, "SLESS_API_TOKEN="+u.Token)

	t.Run("not logged in", func(t *testing.T) {
		newCLI(t).fails([]string{"fn", "ls"}, "not logged in", "sless login")
	})

	t.Run("login", func(t *testing.T) {
		dir := t.TempDir()
		parts := strings.Split(u.Token, ".")
		sig := []byte(parts[2])
		sig[0] ^= 1 // still base64url, no longer the signature
		if sig[0] == parts[2][0] {
			t.Fatal("signature unchanged")
		}
		wrong := filepath.Join(dir, "wrong")
		os.WriteFile(wrong, []byte(parts[0]+"."+parts[1]+"."+string(sig)+"\n"), 0o600)
		user.fails([]string{"login", "--endpoint", u.URL, "--token-file", wrong}, "login failed", "refused the token", "unauthenticated")
		garbage := filepath.Join(dir, "garbage")
		os.WriteFile(garbage, []byte("not-a-token"), 0o600)
		user.fails([]string{"login", "--endpoint", u.URL, "--token-file", garbage}, "login failed", "not a JWT")
		user.fails([]string{"login", "--endpoint", u.URL, "--token-file", filepath.Join(dir, "missing")}, "reading the token")
		if _, err := os.Stat(user.configFile()); !os.IsNotExist(err) {
			t.Fatalf("a failed login wrote the config: %v", err)
		}

		good := filepath.Join(dir, "good")
		os.WriteFile(good, []byte(u.Token+"\n"), 0o600)
		r := user.ok("login", "--endpoint", u.URL+"/", "--token-file", good)
		if !strings.Contains(r.stdout, "Logged in to "+u.URL) || !strings.Contains(r.stdout, u.Client.Namespace()) {
			t.Errorf("login printed %q", r.stdout)
		}
		st, err := os.Stat(user.configFile())
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("config mode %o, want 600", st.Mode().Perm())
		}
		if dst, _ := os.Stat(filepath.Dir(user.configFile())); dst.Mode().Perm() != 0o700 {
			t.Errorf("config dir mode %o, want 700", dst.Mode().Perm())
		}
		b, _ := os.ReadFile(user.configFile())
		var cfg struct{ Endpoint, Token string }
		if err := yaml.Unmarshal(b, &cfg); err != nil || cfg.Endpoint != u.URL || cfg.Token != u.Token {
			t.Errorf("config %q (%v)", b, err)
		}
		// The token from standard input, into another config.
		other := newCLI(t)
		other.runIn(u.Token, "login", "--endpoint", u.URL, "--token-file", "-")
		if _, err := os.Stat(other.configFile()); err != nil {
			t.Errorf("login from stdin: %v", err)
		}
		if r := user.ok("fn", "ls"); !strings.Contains(r.stdout, "NAME") {
			t.Errorf("fn ls after login: %q", r.stdout)
		}
	})

	t.Run("environment without a config file, and over it", func(t *testing.T) {
		if _, err := os.Stat(envOnly.configFile()); !os.IsNotExist(err) {
			t.Fatalf("config file present: %v", err)
		}
		var l apiv1.List[apiv1.Function]
		if r := envOnly.ok("fn", "ls", "-o", "json"); json.Unmarshal([]byte(r.stdout), &l) != nil || l.Items == nil {
			t.Errorf("fn ls -o json: %q", r.stdout)
		}
		// Each variable overrides the logged-in config.
		user.with("SLESS_ENDPOINT=http://127.0.0.1:1").fails([]string{"fn", "ls"}, "127.0.0.1:1")
		user.with("SLESS_API_TOKEN="+strings.Replace(u.Token, ".", "x.", 1)).fails([]string{"fn", "ls"}, "unauthenticated")
		envOnly.with("SLESS_API_TOKEN=").fails([]string{"fn", "ls"}, "no API token")
	})

	// Every author command below runs from the environment alone.
	c := envOnly
	dir := writeDir(t, map[string]string{"handler.py": cliHandler, "lib/util.py": "X = 1\n", ".git/HEAD": "ref: refs/heads/main\n"})

	t.Run("deploy to Ready", func(t *testing.T) {
		r := c.ok("fn", "deploy", dir, "--name", "hello", "--runtime", "python3.11", "--env", "GREETING=hi", "--memory-mb", "128", "--max-replicas", "2")
		if !strings.Contains(r.stdout, "function hello is Ready: "+u.URL+"/fn/") {
			t.Errorf("stdout %q", r.stdout)
		}
		for _, w := range []string{"created function hello", "uploaded", "Building", "Ready"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("progress lacks %q:\n%s", w, r.stderr)
			}
		}
		f, err := u.Client.GetFunction(ctx, "hello")
		if err != nil || f.Status.Phase != apiv1.PhaseReady || f.MemoryMB != 128 || f.MaxReplicas != 2 || f.Entrypoint != "handler.handle" || f.EnvVars["GREETING"] != "hi" {
			t.Fatalf("function %+v %v", f, err)
		}
	})

	t.Run("invoke", func(t *testing.T) {
		a := decodeAnswer(t, c.ok("invoke", "hello", "--path", "/items/7?color=red").stdout)
		if a.Method != "GET" || a.Path != "/items/7" || a.Query["color"][0] != "red" || a.Greeting != "hi" || a.V != 1 {
			t.Errorf("GET: %+v", a)
		}
		a = decodeAnswer(t, c.ok("invoke", "hello", "-d", `{"n":42}`).stdout)
		if m, _ := a.Body.(map[string]any); a.Method != "POST" || m["n"] != float64(42) {
			t.Errorf("POST: %+v", a)
		}
		ev := filepath.Join(t.TempDir(), "event.json")
		os.WriteFile(ev, []byte(`{"from":"file"}`), 0o644)
		a = decodeAnswer(t, c.ok("invoke", "hello", "-X", "PUT", "-d", "@"+ev, "--path", "x").stdout)
		if m, _ := a.Body.(map[string]any); a.Method != "PUT" || a.Path != "/x" || m["from"] != "file" {
			t.Errorf("PUT @file: %+v", a)
		}
		r := c.fails([]string{"invoke", "hello", "--path", "/teapot"}, "418")
		if r.stdout != "short and stout" {
			t.Errorf("the non-2xx body: %q", r.stdout)
		}
	})

	t.Run("logs and events", func(t *testing.T) {
		c.ok("invoke", "hello", "--path", "/log-marker-1")
		waitUntil(t, 60*time.Second, "the handler's line in sless logs", func() bool {
			return strings.Contains(c.ok("logs", "hello").stdout, " handled /log-marker-1\n")
		})
		var marked []apiv1.LogLine
		for _, l := range strings.Split(strings.TrimSpace(c.ok("logs", "hello", "--tail", "1000", "-o", "json").stdout), "\n") {
			var ll apiv1.LogLine
			if err := json.Unmarshal([]byte(l), &ll); err != nil {
				t.Fatalf("-o json line %q: %v", l, err)
			}
			if ll.Line == "handled /log-marker-1" {
				marked = append(marked, ll)
			}
		}
		if len(marked) != 1 || marked[0].Instance == "" || marked[0].Time.IsZero() || marked[0].Stream == apiv1.StreamBuild {
			t.Errorf("-o json: the marker's lines %+v", marked)
		}
		if r := c.ok("logs", "hello", "--tail", "0"); r.stdout != "" {
			t.Errorf("--tail 0 printed %q", r.stdout)
		}
		if r := c.ok("logs", "hello", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); r.stdout != "" {
			t.Errorf("--since an hour ahead printed %q", r.stdout)
		}
		// The build log: the pipeline's stage lines, without an instance column.
		b := c.ok("logs", "hello", "--build").stdout
		for _, w := range []string{"build of " + u.Client.Namespace() + "/hello", "building: ", "built "} {
			if !strings.Contains(b, w) {
				t.Errorf("--build lacks %q:\n%s", w, b)
			}
		}
		ev := c.ok("fn", "events", "hello").stdout
		for _, w := range []string{"Stored", "Building", "Built", "Starting", "Ready"} {
			if !strings.Contains(ev, " "+w+" ") {
				t.Errorf("events lack %s:\n%s", w, ev)
			}
		}
		var e apiv1.Event
		if l, _, _ := strings.Cut(c.ok("fn", "events", "hello", "-o", "json").stdout, "\n"); json.Unmarshal([]byte(l), &e) != nil || e.Reason == "" || e.Time.IsZero() {
			t.Errorf("events -o json: %q", l)
		}

		// What the function wrote reaches the terminal without its controls (termSafe).
		c.ok("invoke", "hello", "--path", "/hostile")
		var hostile string
		waitUntil(t, 60*time.Second, "the hostile line in sless logs", func() bool {
			hostile = c.ok("logs", "hello").stdout
			return strings.Contains(hostile, "hostile-marker")
		})
		if !strings.Contains(hostile, " hostile-markerXY\n") || strings.ContainsAny(hostile, "\x1b\x07\r\u009b") {
			t.Errorf("sless logs passed terminal controls on: %q", hostile)
		}

		// -f prints the lines that come, until interrupted (exit 0).
		// The stream shows nothing when it opens: invoke until the line comes (one written before
		// it opened is not new).
		f := c.start("logs", "hello", "-f", "--tail", "0")
		waitUntil(t, 60*time.Second, "sless logs -f to print a new line", func() bool {
			c.ok("invoke", "hello", "--path", "/log-marker-2")
			return strings.Contains(f.stdout.String(), " handled /log-marker-2\n")
		})
		if code := f.interrupt(t); code != 0 {
			t.Errorf("logs -f interrupted: exit %d, stderr %s", code, f.stderr.String())
		}
		if strings.Contains(f.stdout.String(), "log-marker-1") {
			t.Errorf("logs -f --tail 0 printed an old line:\n%s", f.stdout.String())
		}

		c.fails([]string{"logs", "nope"}, "not_found", `"nope"`)
		c.fails([]string{"fn", "events", "nope"}, "not_found")
	})

	t.Run("fn ls and get", func(t *testing.T) {
		r := c.ok("fn", "ls")
		if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") ||
			!strings.Contains(lines[1], "hello") || !strings.Contains(lines[1], "Ready") || !strings.Contains(lines[1], "python3.11") {
			t.Errorf("table:\n%s", r.stdout)
		}
		var l apiv1.List[apiv1.Function]
		if err := json.Unmarshal([]byte(c.ok("fn", "ls", "-o", "json").stdout), &l); err != nil || len(l.Items) != 1 || l.Items[0].Name != "hello" {
			t.Errorf("json: %+v %v", l, err)
		}
		var ly apiv1.List[apiv1.Function]
		if err := yaml.Unmarshal([]byte(c.ok("fn", "ls", "-o", "yaml").stdout), &ly); err != nil || len(ly.Items) != 1 || ly.Items[0].Status.Phase != apiv1.PhaseReady {
			t.Errorf("yaml: %+v %v", ly, err)
		}
		var f apiv1.Function
		if err := json.Unmarshal([]byte(c.ok("fn", "get", "hello", "-o", "json").stdout), &f); err != nil || f.Name != "hello" || f.EnvVars["GREETING"] != "hi" || f.Status.URL == "" {
			t.Errorf("get json: %+v %v", f, err)
		}
		y := c.ok("fn", "get", "hello", "-o", "yaml").stdout
		if !strings.Contains(y, "name: hello") || !strings.Contains(y, "phase: Ready") || !strings.Contains(y, "GREETING: hi") {
			t.Errorf("get yaml:\n%s", y)
		}
		tb := c.ok("fn", "get", "hello").stdout
		for _, w := range []string{"Name:", "hello", "Phase:", "Ready", "Env:", "GREETING", "Memory:", "128 MiB"} {
			if !strings.Contains(tb, w) {
				t.Errorf("get table lacks %q:\n%s", w, tb)
			}
		}
		if strings.Contains(tb, "hi\n") {
			t.Errorf("the table shows env values:\n%s", tb)
		}
		if r := c.run("fn", "ls", "-o", "xml"); r.code != 2 || !strings.Contains(r.stderr, "table, json or yaml") {
			t.Errorf("-o xml: exit %d %s", r.code, r.stderr)
		}
	})

	t.Run("update keeps what is not given", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "handler.py"), []byte(strings.Replace(cliHandler, "V = 1", "V = 2", 1)), 0o644)
		r := c.ok("fn", "deploy", dir, "--name", "hello", "--min-replicas", "1")
		if !strings.Contains(r.stderr, "updated function hello") {
			t.Errorf("stderr %s", r.stderr)
		}
		a := decodeAnswer(t, c.ok("invoke", "hello").stdout)
		if a.V != 2 || a.Greeting != "hi" {
			t.Errorf("after the update: %+v", a)
		}
		f, _ := u.Client.GetFunction(ctx, "hello")
		if f.MinReplicas != 1 || f.MemoryMB != 128 || f.Runtime != "python3.11" {
			t.Errorf("spec after the update %+v", f)
		}
	})

	t.Run("a deploy that fails", func(t *testing.T) {
		bad := writeDir(t, map[string]string{"handler.py": "def handle(event)\n    return 1\n"})
		c.fails([]string{"fn", "deploy", bad, "--name", "broken", "--runtime", "python3.11"}, "function broken failed", "Failed", "SyntaxError")
		// The platform's message for a handler that does not exist varies with how the start
		// failed (the runtime's own line is not always in it): only the failure is asserted.
		r := c.fails([]string{"fn", "deploy", dir, "--name", "nohandler", "--runtime", "python3.11", "--entrypoint", "handler.nope"}, "function nohandler failed (phase Failed)")
		t.Logf("a missing handler:\n%s", r.stderr)
		// A build failure: the stage, the message and the build log's last lines.
		deps := writeDir(t, map[string]string{"handler.py": cliHandler, "requirements.txt": "--index-url http://example.invalid/simple\nsix\n"})
		r = c.fails([]string{"fn", "deploy", deps, "--name", "baddeps", "--runtime", "python3.11"},
			"function baddeps failed (phase Failed) after stage Stored: ", "sets the package index", "lines of the build log:\n  build of ", "\n  failed after ")
		t.Logf("a refused requirements.txt:\n%s", r.stderr)
		link := writeDir(t, map[string]string{"handler.py": cliHandler})
		os.Symlink("/etc/passwd", filepath.Join(link, "passwd"))
		c.fails([]string{"fn", "deploy", link, "--name", "linked", "--runtime", "python3.11"}, "not a regular file")
		c.fails([]string{"fn", "deploy", dir, "--name", "Bad_Name", "--runtime", "python3.11"}, "invalid_argument")
		c.fails([]string{"fn", "deploy", dir, "--name", "noruntime"}, "--runtime is required")
		if _, err := u.Client.GetFunction(ctx, "linked"); err == nil {
			t.Errorf("a refused directory created its function")
		}
	})

	t.Run("triggers", func(t *testing.T) {
		if _, err := u.Client.CreateTrigger(ctx, apiv1.Trigger{Name: "hello-web", Type: apiv1.TriggerHTTP, FunctionRef: "hello"}); err != nil {
			t.Fatal(err)
		}
		if r := c.ok("triggers", "ls"); !strings.Contains(r.stdout, "hello-web") || !strings.Contains(r.stdout, "true") {
			t.Errorf("ls:\n%s", r.stdout)
		}
		c.ok("triggers", "disable", "hello-web")
		var l apiv1.List[apiv1.Trigger]
		if err := json.Unmarshal([]byte(c.ok("triggers", "ls", "-o", "json").stdout), &l); err != nil || len(l.Items) != 1 || l.Items[0].IsEnabled() {
			t.Errorf("after disable: %+v %v", l, err)
		}
		waitUntil(t, 30*time.Second, "invoke to answer 503", func() bool {
			r := c.run("invoke", "hello")
			return r.code != 0 && strings.Contains(r.stderr, "503") && strings.Contains(r.stderr, "disabled by trigger hello-web") && strings.Contains(r.stderr, "not_ready")
		})
		c.ok("triggers", "enable", "hello-web")
		if y := c.ok("triggers", "ls", "-o", "yaml").stdout; !strings.Contains(y, "enabled: true") {
			t.Errorf("after enable:\n%s", y)
		}
		waitUntil(t, 60*time.Second, "the function to serve again", func() bool { return c.run("invoke", "hello").code == 0 })
		c.fails([]string{"triggers", "enable", "nope"}, "not_found")
	})

	t.Run("egress", func(t *testing.T) {
		if r := c.ok("egress", "get"); !strings.Contains(r.stdout, "namespace") || !strings.Contains(r.stdout, "internet") {
			t.Errorf("get:\n%s", r.stdout)
		}
		c.fails([]string{"egress", "set", "--mode", "none", "--allow", "10.0.5.7"}, `egress allow "10.0.5.7"`)
		c.fails([]string{"egress", "set", "--mode", "none", "--allow", "10.0.5.7/32:5432"}, "invalid_argument", `"10.0.5.7/32:5432" widens`)
		var eg apiv1.Egress
		if err := json.Unmarshal([]byte(c.ok("egress", "set", "--mode", "none", "-o", "json").stdout), &eg); err != nil || eg.Mode != apiv1.EgressNone {
			t.Errorf("set --mode none: %+v %v", eg, err)
		}
		if got, err := u.Client.GetEgress(ctx); err != nil || got.Mode != apiv1.EgressNone {
			t.Errorf("the server's rule after set: %+v %v", got, err)
		}
		c.ok("egress", "set", "--mode", "internet")
	})

	t.Run("jobs run", func(t *testing.T) {
		r := c.ok("jobs", "run", "sum", "--function", "hello", "--event", `{"input":[1,2,3]}`)
		if !strings.Contains(r.stdout, `"sum": 6`) {
			t.Errorf("run 1: %q %s", r.stdout, r.stderr)
		}
		// Again: a new run with the new event, the function taken from the job.
		if r = c.ok("jobs", "run", "sum", "--event", `{"input":[10,20]}`); !strings.Contains(r.stdout, `"sum": 30`) || !strings.Contains(r.stderr, "run 2") {
			t.Errorf("run 2: %q %s", r.stdout, r.stderr)
		}
		c.fails([]string{"jobs", "run", "boom", "--function", "hello", "--event", `{"boom":1}`}, "job boom run 1 failed", "boom requested")
		c.fails([]string{"jobs", "run", "x", "--function", "hello", "--event", `{nope`}, "not JSON")
		c.fails([]string{"jobs", "run", "x", "--function", "nope"}, "invalid_argument", `function_ref "nope": no such function`)
	})

	// The runtime lifecycle: a deploy on a deprecated runtime succeeds with the API's warning on
	// stderr (and as an event); moving to the replacement is a deploy without one. The install's
	// runtimes carry the images it builds on.
	t.Run("deprecated runtime", func(t *testing.T) {
		rts, err := u.Client.Runtimes(ctx)
		if err != nil || len(rts) != len(apiv1.Runtimes()) {
			t.Fatalf("runtimes %+v %v", rts, err)
		}
		for _, rt := range rts {
			if !strings.Contains(rt.Image, "@sha256:") {
				t.Errorf("runtime %s has no image by digest on sless up: %+v", rt.Name, rt)
			}
		}
		node := writeDir(t, map[string]string{"handler.js": "exports.handle = async () => ({ node: process.versions.node });\n"})
		r := c.ok("fn", "deploy", node, "--name", "legacy", "--runtime", "nodejs20")
		if !strings.Contains(r.stderr, "Warning: runtime nodejs20 is deprecated since 2026-04-30") || !strings.Contains(r.stderr, "move to nodejs22") {
			t.Errorf("deploy on nodejs20: no warning on stderr:\n%s", r.stderr)
		}
		if !strings.Contains(r.stdout, "function legacy is Ready") {
			t.Errorf("deploy on nodejs20: %q", r.stdout)
		}
		if r := c.ok("fn", "events", "legacy"); !strings.Contains(r.stdout, "RuntimeDeprecated") || !strings.Contains(r.stdout, "warning: runtime nodejs20 is deprecated") {
			t.Errorf("fn events: %q", r.stdout)
		}
		r = c.ok("fn", "deploy", node, "--name", "legacy", "--runtime", "nodejs22")
		if strings.Contains(r.stderr, "Warning:") || !strings.Contains(r.stdout, "function legacy is Ready") {
			t.Errorf("deploy on nodejs22: %q\n%s", r.stdout, r.stderr)
		}
		if a := c.ok("invoke", "legacy").stdout; !strings.Contains(a, `"node":"22.`) {
			t.Errorf("legacy on nodejs22 answers %q", a)
		}
		c.ok("fn", "rm", "legacy")
	})

	t.Run("unknown function", func(t *testing.T) {
		for _, args := range [][]string{{"fn", "get", "nope"}, {"invoke", "nope"}, {"fn", "rm", "nope"}} {
			c.fails(args, "not_found", "404", `"nope"`)
		}
	})

	t.Run("rm", func(t *testing.T) {
		if r := c.ok("fn", "rm", "hello", "broken", "baddeps"); !strings.Contains(r.stdout, "function hello deleted") || !strings.Contains(r.stdout, "function broken deleted") {
			t.Errorf("rm: %q", r.stdout)
		}
		c.fails([]string{"fn", "get", "hello"}, "not_found")
	})
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Help and completion need no API: --help on every level, the platform commands' own flags, and
// completion scripts for the three shells.
func TestHelpAndCompletion(t *testing.T) {
	c := newCLI(t)
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := c.ok("completion", shell); len(r.stdout) < 1000 || !strings.Contains(r.stdout, "sless") {
			t.Errorf("completion %s: %d bytes", shell, len(r.stdout))
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "fn"},
		{[]string{"fn", "--help"}, "deploy"},
		{[]string{"fn", "deploy", "--help"}, "--max-replicas"},
		{[]string{"invoke", "--help"}, "--path"},
		{[]string{"logs", "--help"}, "--build"},
		{[]string{"fn", "events", "--help"}, "--follow"},
		{[]string{"jobs", "run", "--help"}, "--event"},
		{[]string{"fn", "deploy", "--help"}, "--secret-file"},
		{[]string{"secret", "set", "--help"}, "--from-file"},
		{[]string{"secret", "--help"}, "ls"},
		{[]string{"triggers", "disable", "--help"}, "Disable"},
		{[]string{"login", "--help"}, "--token-file"},
		{[]string{"help", "up"}, "--data-dir"},
		{[]string{"help", "registry"}, "credential"},
		{[]string{"version"}, "sless "},
		{[]string{"--version"}, "sless "},
	} {
		if r := c.ok(tc.args...); !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v: stdout lacks %q:\n%s", tc.args, tc.want, r.stdout)
		}
	}
	// The platform commands are cobra commands too: --help prints their flags, and their flag
	// names complete from cobra itself.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"build", "--help"}, "--runtime-image"}, {[]string{"up", "--help"}, "--tenant-quota-memory"}, {[]string{"down", "--help"}, "--podman-root"},
		{[]string{"deps", "push", "--help"}, "--prefix"}, {[]string{"runtime", "build", "--help"}, "--base"}, {[]string{"registry", "--help"}, "--sweep-at-start"},
		{[]string{"registry", "credential", "--help"}, "--auth-dir"}, {[]string{"policy-wait", "--help"}, "--denied"},
	} {
		if r := c.ok(tc.args...); !strings.Contains(r.stdout, "Flags:") || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%v prints no %s:\n%s%s", tc.args, tc.want, r.stdout, r.stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "build", "--runtime-"}, "--runtime-image"},
		{[]string{"__complete", "up", "--tenant-quota-"}, "--tenant-quota-runs"},
		{[]string{"__complete", "registry", "credential", "--"}, "--auth-dir"},
		{[]string{"__complete", "registry", "credential", ""}, "platform"},
		{[]string{"__complete", "runtime", "build", "--runtime", ""}, "nodejs20"},
	} {
		if r := c.ok(tc.args...); !strings.Contains(r.stdout, tc.want) {
			t.Errorf("completing %v: %q lacks %s", tc.args[1:], r.stdout, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fn", "get"}, "accepts 1 arg"},
		{[]string{"fn", "deploy", "."}, `"name" not set`},
		{[]string{"fn", "frob"}, `unknown command "frob"`},
		{[]string{"invoke", "x", "--nope"}, "unknown flag: --nope"},
		{[]string{"login"}, `"token-file" not set`},
		{[]string{"deps"}, "needs a subcommand"},
		{[]string{"secret"}, "needs a subcommand"},
		{[]string{"secret", "ls", "extra"}, "unknown command"},
		{[]string{"logs"}, "accepts 1 arg"},
		{[]string{"logs", "x", "--since", "yesterday"}, "--since"},
		{[]string{"logs", "x", "--tail", "-1"}, "--tail -1"},
		{[]string{"fn", "events", "x", "-o", "yaml"}, "text or json"},
		{[]string{"fn", "deploy", ".", "--name", "x", "--env", "NOEQUALS"}, "must be K=V"},
		// pflag reads one dash as shorthand flags: the long form of every flag is --flag.
		{[]string{"down", "-data-dir", "/nonexistent"}, "unknown shorthand flag"},
		{[]string{"up", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"up", "stray"}, `unknown command "stray"`},
		{[]string{"registry", "credential", "--auth-dir", "x"}, "usage: sless registry credential"},
		{[]string{"runtime", "build", "--runtime", "cobol"}, "is not a runtime"},
		{[]string{"up", "--jwks-url", "http://x/jwks", "--jwt-public-key", "k.pem"}, "at most one"},
	} {
		if r := c.run(tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
