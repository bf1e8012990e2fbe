package testenv

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/internal/ports"
)

// rabbitmqScript is the broker's start script in Debian's rabbitmq-server package: the one
// /usr/sbin/rabbitmq-server wraps (that wrapper switches to the rabbitmq user and logs to
// /var/log/rabbitmq, which a private node must not do).
const rabbitmqScript = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// rabbitmqStartTimeout bounds how long a start may take before it fails with the node's log.
const rabbitmqStartTimeout = 60 * time.Second

// RabbitMQ is a real RabbitMQ broker (Debian's rabbitmq-server) run by a test as a private Erlang
// node: its own node name, data, logs, configuration and cookie under a temporary directory, its
// AMQP listener, distribution port and epmd on free ports of 127.0.0.1, and a user of its own
// (no guest). It never uses or starts the machine's packaged broker or the epmd on 4369. Stop
// and Start restart it on the same data and port (durable queues and persistent messages
// survive); its methods are safe for concurrent use.
type RabbitMQ struct {
	Node     string // the Erlang node name, sless-<random>@localhost
	Port     int    // the AMQP listener on 127.0.0.1
	DistPort int    // the node's Erlang distribution listener on 127.0.0.1
	EPMDPort int    // the private epmd's port on 127.0.0.1 (ERL_EPMD_PORT)
	User     string
	Password string
	Dir      string // HOME (with the Erlang cookie), config, mnesia/ and log/

	env   []string   // the environment of the broker and its CLI tools
	ctlMu sync.Mutex // one rabbitmqctl at a time: they share one distribution port

	mu       sync.Mutex
	cmd      *exec.Cmd      // the node (beam.smp, exec'd by the start script); nil while stopped
	stdin    io.WriteCloser // held open: the node halts when it reads EOF (the test process died)
	done     chan struct{}  // closed when cmd has exited
	epmd     *exec.Cmd
	epmdDone chan struct{}
	out      *LockedBuffer // the node's stdout and stderr, over every start
}

// StartRabbitMQ starts a private RabbitMQ node for the test's lifetime and waits until it accepts
// AMQP connections. The node and its epmd are killed when the test ends. A missing
// rabbitmq-server skips the test (fails under SLESS_REQUIRE_REAL=1).
func StartRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	if _, err := os.Stat(rabbitmqScript); err != nil {
		Missing(t, "RabbitMQ (Debian package rabbitmq-server)", err)
	}
	if _, err := epmdPath(); err != nil {
		Missing(t, "epmd (Debian package erlang-base, a dependency of rabbitmq-server)", err)
	}
	r, err := newRabbitMQ(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	if err := r.startEPMD(); err != nil {
		t.Fatal(err)
	}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// RunRabbitMQ starts a private RabbitMQ node with its files under dir, outside a test (the
// benchmarks); Close stops it.
func RunRabbitMQ(dir string) (*RabbitMQ, error) {
	if _, err := os.Stat(rabbitmqScript); err != nil {
		return nil, fmt.Errorf("RabbitMQ (Debian package rabbitmq-server): %w", err)
	}
	r, err := newRabbitMQ(dir)
	if err != nil {
		return nil, err
	}
	if err := r.startEPMD(); err != nil {
		r.kill()
		return nil, err
	}
	if err := r.start(); err != nil {
		r.kill()
		return nil, err
	}
	return r, nil
}

// Close kills the node and its epmd (RunRabbitMQ's).
func (r *RabbitMQ) Close() { r.kill() }

// newRabbitMQ picks the node's name, ports and credentials and writes its files under dir. The
// broker runs as the current user, root included (RabbitMQ does not refuse root, unlike
// PostgreSQL), so dir may be a t.TempDir().
func newRabbitMQ(dir string) (*RabbitMQ, error) {
	r := &RabbitMQ{Dir: dir, User: "sless-test", Password: randomHex(16), out: &LockedBuffer{}}
	r.Node = "sless-" + randomHex(6) + "@localhost"
	for _, p := range []*int{&r.Port, &r.DistPort, &r.EPMDPort} {
		var err error
		if *p, err = ports.FreeOn("127.0.0.1"); err != nil {
			return nil, fmt.Errorf("finding a free port for RabbitMQ: %w", err)
		}
	}
	ctlPort, err := ports.FreeOn("127.0.0.1") // the CLI tools' own distribution listener (Ctl)
	if err != nil {
		return nil, fmt.Errorf("finding a free port for rabbitmqctl: %w", err)
	}
	home := filepath.Join(dir, "home")
	for _, d := range []string{home, filepath.Join(dir, "mnesia"), filepath.Join(dir, "log")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Erlang reads the cookie from $HOME and refuses one others may read.
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(strings.ToUpper(randomHex(20))), 0o400); err != nil {
		return nil, err
	}
	defs, err := rabbitmqDefinitions(r.User, r.Password)
	if err != nil {
		return nil, err
	}
	files := map[string]string{
		"definitions.json": defs,
		"enabled_plugins":  "[].\n",
		"rabbitmq-env.conf": "# empty: the broker's environment comes from the test helper, not " +
			"/etc/rabbitmq/rabbitmq-env.conf\n",
		// With definitions to load, the broker creates no guest user and default vhost of its own.
		"rabbitmq.conf": fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nload_definitions = %s\n"+
			"log.console = false\nlog.file.level = info\ndisk_free_limit.absolute = 10MB\n",
			r.Port, filepath.Join(dir, "definitions.json")),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return nil, err
		}
	}
	r.env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC",
		"ERL_EPMD_PORT=" + strconv.Itoa(r.EPMDPort), "ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME=" + r.Node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(r.Port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(r.DistPort),
		"RABBITMQ_CTL_DIST_PORT_MIN=" + strconv.Itoa(ctlPort),
		"RABBITMQ_CTL_DIST_PORT_MAX=" + strconv.Itoa(ctlPort),
		"RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false",
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"), // absent
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		// The distribution listens on loopback only, and the node never starts an epmd of its own
		// (the shared one on 4369): it fails instead when the private one is not there.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false",
		// The start script then execs the node in place of itself (no shell in between), so the
		// parent-death signal reaches the node, and a node whose stdin reaches EOF halts.
		"RABBITMQ_ALLOW_INPUT=true",
	}
	return r, nil
}

// rabbitmqDefinitions is a definitions file creating the vhost "/" and user with every
// permission there, its password salted and hashed as RabbitMQ's default (SHA-256) hashing does.
func rabbitmqDefinitions(user, password string) (string, error) {
	salt := make([]byte, 4)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(append([]byte{}, salt...), password...))
	b, err := json.MarshalIndent(map[string]any{
		"users": []map[string]string{{"name": user, "tags": "administrator",
			"password_hash":     base64.StdEncoding.EncodeToString(append(salt, sum[:]...)),
			"hashing_algorithm": "rabbit_password_hashing_sha256"}},
		"vhosts":      []map[string]string{{"name": "/"}},
		"permissions": []map[string]string{{"user": user, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}},
	}, "", "  ")
	return string(b), err
}

// URL is the AMQP URL of the broker's vhost "/" with the test user's credentials:
// amqp://user:pass@127.0.0.1:port/.
func (r *RabbitMQ) URL() string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword(r.User, r.Password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)), Path: "/"}).String()
}

// Addr is the AMQP listener's host:port.
func (r *RabbitMQ) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// Stop shuts the broker down cleanly (as a host's service stop does: clients see their
// connections closed) and keeps its data for Start. Its epmd keeps running.
func (r *RabbitMQ) Stop(t testing.TB) {
	t.Helper()
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// Start runs the broker again after Stop, on the same node name, port and data, and waits until
// it accepts AMQP connections.
func (r *RabbitMQ) Start(t testing.TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
}

// Running reports whether the node is running (started and not stopped or exited).
func (r *RabbitMQ) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// Ctl runs rabbitmqctl against the node (e.g. "list_queues", "close_all_connections", "reason")
// and returns its output; a failure fails the test. Calls are serialised.
func (r *RabbitMQ) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := r.ctl(args...)
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

func (r *RabbitMQ) ctl(args ...string) (string, error) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	cmd := exec.Command("/usr/lib/rabbitmq/bin/rabbitmqctl", append([]string{"-n", r.Node, "-q"}, args...)...)
	cmd.Dir, cmd.Env = r.Dir, r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pids are the processes of the node (with its helpers) and its epmd now.
func (r *RabbitMQ) pids() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []int
	if r.cmd != nil {
		ps = append(ps, r.cmd.Process.Pid)
		ps = append(ps, descendants(r.cmd.Process.Pid)...)
	}
	if r.epmd != nil {
		ps = append(ps, r.epmd.Process.Pid)
	}
	return ps
}

// Log is the tail (the last 8 KiB) of the node's log file and of its console output.
func (r *RabbitMQ) Log() string {
	tail := func(s string) string {
		if len(s) > 8<<10 {
			s = "…" + s[len(s)-8<<10:]
		}
		return s
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, "log", r.Node+".log"))
	if err != nil {
		b = []byte(err.Error())
	}
	return "--- " + r.Node + ".log:\n" + tail(string(b)) + "\n--- console:\n" + tail(r.out.String())
}

// startEPMD runs the node's own epmd in the foreground (not -daemon: it stays our child and is
// killed with the test) on EPMDPort of loopback.
func (r *RabbitMQ) startEPMD() error {
	bin, err := epmdPath()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "-port", strconv.Itoa(r.EPMDPort), "-address", "127.0.0.1")
	cmd.Dir, cmd.Env = r.Dir, r.env
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting epmd: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.epmd, r.epmdDone = cmd, done
	r.mu.Unlock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(r.EPMDPort))
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("epmd on %s exited: %s", addr, r.out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("epmd not listening on %s within 10 s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func epmdPath() (string, error) {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p, nil
	}
	ms, _ := filepath.Glob("/usr/lib/erlang/erts-*/bin/epmd")
	if len(ms) == 0 {
		return "", errors.New("no epmd on PATH or in /usr/lib/erlang/erts-*/bin (apt-get install rabbitmq-server)")
	}
	return ms[len(ms)-1], nil
}

// start runs the node and waits until an AMQP connection with the test user's credentials opens.
func (r *RabbitMQ) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return errors.New("rabbitmq is already running")
	}
	cmd := exec.Command(rabbitmqScript)
	cmd.Dir, cmd.Env = r.Dir, r.env
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting rabbitmq-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.cmd, r.stdin, r.done = cmd, stdin, done

	deadline := time.Now().Add(rabbitmqStartTimeout)
	for {
		conn, err := amqp.DialConfig(r.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			r.cmd, r.stdin, r.done = nil, nil, nil
			return fmt.Errorf("rabbitmq node %s exited before accepting connections on %s:\n%s", r.Node, r.Addr(), r.Log())
		default:
		}
		if time.Now().After(deadline) {
			r.stopLocked(false)
			return fmt.Errorf("rabbitmq node %s not accepting AMQP connections on %s within %v (%v):\n%s",
				r.Node, r.Addr(), rabbitmqStartTimeout, err, r.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *RabbitMQ) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked(true)
}

// stopLocked ends the node: SIGTERM (Erlang's clean shutdown) when graceful, waiting up to 30 s
// before SIGKILL; else SIGKILL at once, its helper processes too. Either way it returns when the
// node and its helpers are gone.
func (r *RabbitMQ) stopLocked(graceful bool) error {
	if r.cmd == nil {
		return nil
	}
	cmd, stdin, done := r.cmd, r.stdin, r.done
	r.cmd, r.stdin, r.done = nil, nil, nil
	defer stdin.Close()
	// erl_child_setup and the inet_gethost it starts are in sessions of their own: not in the
	// node's process group. They exit when the node has, a moment later.
	helpers := descendants(cmd.Process.Pid)
	var err error
	if graceful {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			err = fmt.Errorf("rabbitmq node %s did not shut down within 30 s; killed:\n%s", r.Node, r.Log())
		}
	}
	select {
	case <-done: // exited: its process group may be gone, its id reused
	default:
		helpers = descendants(cmd.Process.Pid)
		for _, pid := range helpers {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		// The node leads its process group while it has not been reaped.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if left := waitGone(helpers, 10*time.Second); len(left) > 0 && err == nil {
		err = fmt.Errorf("rabbitmq node %s: its helper processes %v still run 10 s after it exited", r.Node, left)
	}
	return err
}

// descendants are the processes under pid, from /proc's children lists.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// waitGone waits until none of pids exists, up to timeout, and returns those still there.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if syscall.Kill(p, 0) != syscall.ESRCH {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the node and its epmd at once (the test is over).
func (r *RabbitMQ) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked(false)
	if r.epmd != nil {
		r.epmd.Process.Kill()
		<-r.epmdDone
		r.epmd = nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
