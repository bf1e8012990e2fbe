package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sless-dev/sless/internal/ports"
)

// Postgres is a real PostgreSQL server (Debian's `postgresql` package) started by a test: its own
// data directory, a free port on one address, password authentication. It never touches the
// machine's packaged cluster.
type Postgres struct {
	URL      string // postgres://user:pass@host:port/db?sslmode=disable
	Host     string
	Port     int
	User     string
	Password string
	Database string
	Dir      string // holds data/ (the cluster) and the unix socket

	bin  string              // the directory of initdb and postgres
	cred *syscall.Credential // the postgres system user's, when the test runs as root; nil otherwise

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *LockedBuffer // the server's log (stderr), over every start
}

// PostgreSQL starts a PostgreSQL server on 127.0.0.1 for the test's lifetime, its data in a
// temporary directory removed at the end. Missing binaries skip the test (fail under
// SLESS_REQUIRE_REAL=1).
func PostgreSQL(t testing.TB) *Postgres {
	t.Helper()
	if _, err := postgresBinDir(); err != nil {
		Missing(t, "PostgreSQL (Debian package postgresql)", err)
	}
	// Not t.TempDir(): that is root's, mode 0700, and the server runs as the postgres user.
	dir, err := os.MkdirTemp("", "sless-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := StartPostgres("127.0.0.1", dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		os.RemoveAll(dir)
	})
	return p
}

// StartPostgres creates a cluster in dir/data and runs it on host (a free port there) until Close.
// For callers without a testing.TB (a TestMain) and hosts other than loopback (a cluster's bridge:
// any client that has the password may connect, from any address). dir is created if needed; run
// as root, the server runs as the postgres user, so dir's parents must let that user through
// (os.MkdirTemp under os.TempDir() does; t.TempDir() does not).
func StartPostgres(host, dir string) (*Postgres, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	p := &Postgres{Host: host, User: "sless", Database: "postgres", Dir: dir, bin: bin, out: &LockedBuffer{}}
	if p.Port, err = ports.FreeOn(host); err != nil {
		return nil, fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	secret := make([]byte, 16)
	rand.Read(secret)
	p.Password = hex.EncodeToString(secret)
	p.URL = (&url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password),
		Host: net.JoinHostPort(host, strconv.Itoa(p.Port)), Path: "/" + p.Database, RawQuery: "sslmode=disable"}).String()

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if p.cred, err = postgresUser(); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return nil, err
		}
		if err := reachable(dir, p.cred); err != nil {
			return nil, err
		}
	}
	if err := p.initdb(); err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// initdb creates the cluster with the generated password (scram-sha-256) and lets password
// holders in from anywhere.
func (p *Postgres) initdb() error {
	pwfile := filepath.Join(p.Dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.Password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if p.cred != nil {
		if err := os.Chown(pwfile, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(p.Dir, "data")
	out := &LockedBuffer{}
	cmd := p.command(filepath.Join(p.bin, "initdb"), "--pgdata", data, "--username", p.User, "--pwfile", pwfile,
		"--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initdb in %s: %w: %s", data, err, out.String())
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = hba.WriteString("\n# sless tests: pods of a test cluster connect from their own addresses.\n" +
		"host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	return err
}

// Start runs the server (again, after Stop) on the same port and data and waits until it accepts
// connections.
func (p *Postgres) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errors.New("postgres is already running")
	}
	cmd := p.command(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.Dir, "data"),
		"-c", "listen_addresses="+p.Host, "-c", "port="+strconv.Itoa(p.Port), "-c", "unix_socket_directories="+p.Dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "logging_collector=off", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, p.URL)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			p.cmd, p.done = nil, nil
			return fmt.Errorf("postgres exited: %s", p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.stopLocked()
			return fmt.Errorf("postgres not accepting connections on %s within 60 s (%v): %s", net.JoinHostPort(p.Host, strconv.Itoa(p.Port)), err, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast: open sessions are ended) and keeps its data for Start.
func (p *Postgres) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopLocked()
}

func (p *Postgres) stopLocked() error {
	if p.cmd == nil {
		return nil
	}
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Kill()
	<-done
	return fmt.Errorf("postgres did not shut down within 30 s; killed: %s", p.out.String())
}

// Close stops the server and removes its data.
func (p *Postgres) Close() error {
	err := p.Stop()
	if rerr := os.RemoveAll(filepath.Join(p.Dir, "data")); err == nil {
		err = rerr
	}
	return err
}

// Log is what the server has written so far.
func (p *Postgres) Log() string {
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// command runs a PostgreSQL binary as the postgres user when we are root (initdb and postgres
// refuse root), dying with the test process.
func (p *Postgres) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = p.Dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + p.Dir, "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	return cmd
}

// postgresBinDir finds initdb and postgres: $SLESS_POSTGRES_BIN (a directory), the directory of
// initdb on PATH, else the newest /usr/lib/postgresql/<version>/bin (Debian's layout).
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("SLESS_POSTGRES_BIN"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("$SLESS_POSTGRES_BIN=%s has no initdb and postgres", d)
		}
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.New("no initdb on PATH, in $SLESS_POSTGRES_BIN or /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// postgresUser is the credential of the postgres system user the package creates.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running PostgreSQL as root needs the postgres system user (apt-get install postgresql): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// reachable checks that the postgres user can walk down to dir: every parent must let it search.
func reachable(dir string, c *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		m := st.Mode().Perm()
		ok := m&0o001 != 0 || (sys.Uid == c.Uid && m&0o100 != 0) || (sys.Gid == c.Gid && m&0o010 != 0)
		if !ok {
			return fmt.Errorf("the postgres user cannot reach %s: %s is mode %o, owned by uid %d; put the data under os.TempDir() (os.MkdirTemp), not t.TempDir()",
				dir, d, m, sys.Uid)
		}
		if d == "/" || strings.HasSuffix(d, string(filepath.Separator)) {
			return nil
		}
	}
}
