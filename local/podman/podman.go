package podman

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ContainersConf is what podman needs on hybrid-cgroup machines like ours (DESIGN.md §7).
//
//go:embed containers.conf
var ContainersConf []byte

// GlobalFlags are the global flags every podman call of the project uses: its own storage under
// storageRoot, the overlay driver, cgroupfs and runc (crun fails on these hybrid-cgroup machines).
// Tests and benchmarks use them too, with CONTAINERS_CONF pointing at ContainersConf.
func GlobalFlags(storageRoot string) []string {
	return []string{"--root", filepath.Join(storageRoot, "root"), "--runroot", filepath.Join(storageRoot, "run"),
		"--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--runtime", "runc"}
}

// Ulimits are explicit because runc cannot raise nproc here.
var Ulimits = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"}

// NoIPv6 turns IPv6 off in a tenant container's network namespace: no link-local address of its
// own, none of the host's or another container's to reach (a socket bound to :: still takes
// IPv4). The container cannot turn it on again: /proc/sys is read-only to it and it has no
// CAP_NET_ADMIN.
var NoIPv6 = []string{"--sysctl", "net.ipv6.conf.all.disable_ipv6=1", "--sysctl", "net.ipv6.conf.default.disable_ipv6=1"}

// HostIPv6 reports whether the kernel has IPv6 at all (not booted with ipv6.disable=1): without
// it there is nothing to turn off (NoIPv6's sysctls do not exist) or filter.
var HostIPv6 = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return err == nil
})

// RunFlags are what `podman run` of the project's own (trusted) containers needs here — tests,
// benchmarks: host networking (publishing ports does not forward on these machines) and Ulimits.
// Tenant code runs on a network of its own instead (Spec.Network).
var RunFlags = append([]string{"--network", "host"}, Ulimits...)

// Client runs podman with sless's containers.conf and storage.
type Client struct {
	bin     string
	global  []string
	env     []string
	gate    func(context.Context) error
	idGuard func(context.Context, Spec) (func(), error)
}

// GuardIDs makes every container Start or Create with an IDBase ask guard first: guard refuses
// one whose range is no longer its tenant's, and its done is called once podman has returned
// (the container then exists, or never will), so that a range is not given away while a
// container is being made in it.
func (c *Client) GuardIDs(guard func(ctx context.Context, s Spec) (done func(), err error)) {
	c.idGuard = guard
}

// Gate makes every `podman run` and `podman start` wait for check first and fail with its error:
// the network confinement must be in place before any tenant code runs (network.Ensure).
func (c *Client) Gate(check func(context.Context) error) { c.gate = check }

// New finds podman and writes ContainersConf into confDir; networkConfigDir, when set, is where
// podman finds the CNI networks (network_config_dir), instead of the machine's /etc/cni/net.d.
func New(confDir, storageRoot, networkConfigDir string) (*Client, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("podman is required to run functions on a single host (apt-get install podman runc, or run `make demo`): %w", err)
	}
	conf := filepath.Join(confDir, "containers.conf")
	content := ContainersConf
	if networkConfigDir != "" {
		content = append(append([]byte{}, content...), fmt.Sprintf("[network]\nnetwork_config_dir = %q\n", networkConfigDir)...)
	}
	if err := os.WriteFile(conf, content, 0o644); err != nil {
		return nil, err
	}
	return &Client{bin: bin, global: GlobalFlags(storageRoot), env: append(os.Environ(), "CONTAINERS_CONF="+conf)}, nil
}

// UseAuthFile makes podman read registry credentials from path (a docker config.json) through
// REGISTRY_AUTH_FILE: in the environment, never on a command line where ps shows it.
func (c *Client) UseAuthFile(path string) {
	c.env = append(c.env, "REGISTRY_AUTH_FILE="+path)
}

// Command is a podman command with the client's global flags and environment.
func (c *Client) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, append(append([]string{}, c.global...), args...)...)
	cmd.Env = c.env
	return cmd
}

// ExitError is podman exiting non-zero; Stderr holds its last lines.
type ExitError struct {
	Args   []string
	Code   int
	Stderr string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("podman %s: exit status %d: %s", e.Args[0], e.Code, e.Stderr)
}

// PodmanFailed reports whether podman itself failed (exit 125–127: its storage, a pull, a name
// clash, no such command) rather than the container's command.
func (e *ExitError) PodmanFailed() bool { return e.Code >= 125 && e.Code <= 127 }

// Run runs one podman command and returns its stdout; a non-zero exit is an *ExitError.
func (c *Client) Run(ctx context.Context, args ...string) (string, error) {
	if c.gate != nil && len(args) > 0 && (args[0] == "run" || args[0] == "start") {
		if err := c.gate(ctx); err != nil {
			return "", fmt.Errorf("podman %s: not started, the network confinement is not in place: %w", args[0], err)
		}
	}
	cmd := c.Command(ctx, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			return out.String(), &ExitError{Args: args, Code: ee.ExitCode(), Stderr: strings.TrimSpace(LastLines(stderr.String(), 15))}
		}
		return out.String(), fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(LastLines(stderr.String(), 15)))
	}
	return out.String(), nil
}

// Spec is one container to run.
type Spec struct {
	Name   string
	Image  string
	Labels map[string]string
	// Env is set in the container, in this order.
	Env []EnvVar
	// Detach returns once the container started; Remove deletes it when it exits.
	Detach, Remove bool
	// MemoryMB limits the container's memory; 0 means no limit.
	MemoryMB int
	// Volumes are host:container[:options] bind mounts.
	Volumes []string
	// User runs the command as uid:gid instead of the image's user.
	User string
	// WorkDir replaces the image's working directory.
	WorkDir string
	// Confined runs tenant code as Kubernetes' restricted profile does: no capabilities, no
	// privilege escalation, a read-only root with a small /tmp, and a bound on processes.
	Confined bool
	// Network is the podman network to join; empty means the host's (RunFlags).
	Network string
	// IDBase, when set, runs the container in a user namespace whose ids 0–65535 are host ids
	// IDBase… (a tenant's range): its processes count against that tenant's limits only.
	IDBase uint32
	// Flags are extra `podman run` flags; Command replaces the image's command.
	Flags   []string
	Command []string
}

// Confinement is what Confined adds to `podman run`.
// /dev/shm is a tmpfs of the container's own (--ipc=none): podman's shared one, mounted on the
// host, cannot be removed with the container when it runs in a user namespace (podman 4.3: EBUSY).
var Confinement = []string{"--cap-drop=ALL", "--security-opt", "no-new-privileges", "--read-only",
	"--tmpfs", "/tmp:rw,nosuid,nodev,size=64m,mode=1777", "--pids-limit", "256",
	"--ipc=none", "--tmpfs", "/dev/shm:rw,nosuid,nodev,noexec,size=64m,mode=1777"}

// EnvVar is one environment variable.
type EnvVar struct{ Name, Value string }

// RunArgs are the `podman run` arguments for s (its network or RunFlags, and pulling over plain
// HTTP from a registry on 127.0.0.1, included).
func RunArgs(s Spec) []string { return specArgs("run", s) }

// specArgs are the arguments of `podman run` (verb "run") or `podman create` of s.
func specArgs(verb string, s Spec) []string {
	args := []string{verb, "--name", s.Name}
	if s.Detach && verb == "run" {
		args = append(args, "-d")
	}
	if s.Remove {
		args = append(args, "--rm")
	}
	if s.Network != "" {
		args = append(append(args, "--network", s.Network), Ulimits...)
		if HostIPv6() {
			args = append(args, NoIPv6...)
		}
	} else {
		args = append(args, RunFlags...)
	}
	args = append(args, "--tls-verify=false")
	if s.MemoryMB > 0 {
		args = append(args, "--memory", fmt.Sprintf("%dm", s.MemoryMB))
	}
	if s.Confined {
		args = append(args, Confinement...)
	}
	if s.IDBase != 0 {
		m := fmt.Sprintf("0:%d:65536", s.IDBase)
		args = append(args, "--uidmap", m, "--gidmap", m)
	}
	if s.User != "" {
		args = append(args, "--user", s.User)
	}
	if s.WorkDir != "" {
		args = append(args, "-w", s.WorkDir)
	}
	for _, v := range s.Volumes {
		args = append(args, "-v", v)
	}
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--label", k+"="+s.Labels[k])
	}
	for _, e := range s.Env {
		args = append(args, "-e", e.Name+"="+e.Value)
	}
	args = append(args, s.Flags...)
	args = append(args, s.Image)
	return append(args, s.Command...)
}

// Start runs s and returns its output (with Detach, the container's ID).
func (c *Client) Start(ctx context.Context, s Spec) (string, error) {
	return c.runSpec(ctx, s, RunArgs(s))
}

// Create creates s's container without starting it (`podman create`) and returns its ID.
func (c *Client) Create(ctx context.Context, s Spec) (string, error) {
	return c.runSpec(ctx, s, specArgs("create", s))
}

func (c *Client) runSpec(ctx context.Context, s Spec, args []string) (string, error) {
	if c.idGuard != nil && s.IDBase != 0 {
		done, err := c.idGuard(ctx, s)
		if err != nil {
			return "", fmt.Errorf("podman %s %s: %w", args[0], s.Name, err)
		}
		defer done()
	}
	return c.Run(ctx, args...)
}

// Container is one entry of List.
type Container struct {
	ID       string
	Name     string
	State    string // running, exited, created, …
	Labels   map[string]string
	Networks []string // the podman networks it joined (none: the host's)
}

// List returns the containers that carry label key=value.
func (c *Client) List(ctx context.Context, key, value string) ([]Container, error) {
	out, err := c.Run(ctx, "ps", "-a", "--filter", "label="+key+"="+value, "--format", "json")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		ID       string `json:"Id"`
		Names    []string
		State    string
		Labels   map[string]string
		Networks []string
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	cs := make([]Container, 0, len(raw))
	for _, r := range raw {
		if len(r.Names) > 0 {
			cs = append(cs, Container{ID: r.ID, Name: r.Names[0], State: r.State, Labels: r.Labels, Networks: r.Networks})
		}
	}
	return cs, nil
}

// State is the container's state (running, exited, …).
func (c *Client) State(ctx context.Context, name string) (string, error) {
	out, err := c.Run(ctx, "inspect", "--format", "{{.State.Status}}", name)
	return strings.TrimSpace(out), err
}

// Remove stops the container (SIGTERM, then SIGKILL after grace seconds) and removes it.
func (c *Client) Remove(ctx context.Context, name string, grace int) error {
	_, err := c.Run(ctx, "rm", "-f", "-t", strconv.Itoa(grace), name)
	return err
}

// Wait blocks until the container exits and returns its exit code.
func (c *Client) Wait(ctx context.Context, name string) (int, error) {
	out, err := c.Run(ctx, "wait", name)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// Logs returns the container's stdout and stderr separately (the last n lines each, of which
// the last MaxLogsBytes): n lines of tenant code's may be megabytes each.
func (c *Client) Logs(ctx context.Context, name string, n int) (stdout, stderr string) {
	cmd := c.Command(ctx, "logs", "--tail", strconv.Itoa(n), name)
	o, e := &tailBuffer{max: MaxLogsBytes}, &tailBuffer{max: MaxLogsBytes}
	cmd.Stdout, cmd.Stderr = o, e
	cmd.Run()
	return string(o.b), string(e.b)
}

// MaxLogsBytes is how much of each stream Logs keeps.
const MaxLogsBytes = 64 << 10

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = t.b[:copy(t.b, t.b[over:])]
	}
	t.b = append(t.b, p...)
	return n, nil
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// IP is container name's address on network.
func (c *Client) IP(ctx context.Context, name, network string) (netip.Addr, error) {
	out, err := c.Run(ctx, "inspect", "--type", "container", "--format", "{{json .NetworkSettings.Networks}}", name)
	if err != nil {
		return netip.Addr{}, err
	}
	var nets map[string]struct{ IPAddress string }
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return netip.Addr{}, fmt.Errorf("podman inspect %s: %w", name, err)
	}
	n, ok := nets[network]
	if !ok {
		return netip.Addr{}, fmt.Errorf("container %s is not on network %s", name, network)
	}
	return netip.ParseAddr(n.IPAddress)
}
