package local

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// containersConf is what podman needs on hybrid-cgroup machines like ours (DESIGN.md §7).
//
//go:embed containers.conf
var containersConf []byte

// Labels on every container this instance starts.
const (
	labelInstance  = "dev.sless.instance"
	labelNamespace = "dev.sless.namespace"
	labelFunction  = "dev.sless.function"
	labelPort      = "dev.sless.port"
	labelRole      = "dev.sless.role" // "function", "job", "cron"
)

// podman runs podman with sless's own containers.conf and storage.
type podman struct {
	bin    string
	global []string
	env    []string
}

func newPodman(dataDir, storageRoot string) (*podman, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, fmt.Errorf("podman is required to run functions on a single host (apt-get install podman runc, or run `make demo`): %w", err)
	}
	conf := filepath.Join(dataDir, "containers.conf")
	if err := os.WriteFile(conf, containersConf, 0o644); err != nil {
		return nil, err
	}
	return &podman{bin: bin, global: PodmanGlobalFlags(storageRoot), env: append(os.Environ(), "CONTAINERS_CONF="+conf)}, nil
}

// PodmanGlobalFlags are the global flags every podman call of the project uses: its own storage
// under storageRoot, the overlay driver, cgroupfs and runc (crun fails on these hybrid-cgroup
// machines). Tests and benchmarks use them too, with CONTAINERS_CONF pointing at containers.conf.
func PodmanGlobalFlags(storageRoot string) []string {
	return []string{"--root", filepath.Join(storageRoot, "root"), "--runroot", filepath.Join(storageRoot, "run"),
		"--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--runtime", "runc"}
}

// run runs one podman command and returns stdout; stderr goes into the error.
func (p *podman) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.bin, append(append([]string{}, p.global...), args...)...)
	cmd.Env = p.env
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(lastLines(stderr.String(), 5)))
	}
	return out.String(), nil
}

// PodmanRunFlags are what `podman run` needs here: host networking (publishing ports does not
// forward on these machines) and explicit ulimits (runc cannot raise nproc here).
var PodmanRunFlags = []string{"--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"}

// runFlags add pulling from the embedded registry on 127.0.0.1 over plain HTTP.
var runFlags = append(append([]string{}, PodmanRunFlags...), "--tls-verify=false")

type containerSpec struct {
	name   string
	image  string
	labels map[string]string
	env    map[string]string
	detach bool
	rm     bool
	// memoryMB limits the container's memory (the function's memory_mb); 0 means no limit.
	memoryMB int
	// volumes are host:container[:options] bind mounts.
	volumes []string
}

func (p *podman) start(ctx context.Context, s containerSpec) error {
	args := []string{"run", "--name", s.name}
	if s.detach {
		args = append(args, "-d")
	}
	if s.rm {
		args = append(args, "--rm")
	}
	args = append(args, runFlags...)
	if s.memoryMB > 0 {
		args = append(args, "--memory", fmt.Sprintf("%dm", s.memoryMB))
	}
	for _, v := range s.volumes {
		args = append(args, "-v", v)
	}
	for _, k := range sortedKeys(s.labels) {
		args = append(args, "--label", k+"="+s.labels[k])
	}
	for _, k := range sortedKeys(s.env) {
		args = append(args, "-e", k+"="+s.env[k])
	}
	args = append(args, s.image)
	_, err := p.run(ctx, args...)
	return err
}

type container struct {
	Name   string
	State  string // running, exited, created, …
	Labels map[string]string
}

// list returns this instance's containers.
func (p *podman) list(ctx context.Context, instance string) ([]container, error) {
	out, err := p.run(ctx, "ps", "-a", "--filter", "label="+labelInstance+"="+instance, "--format", "json")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		Names  []string
		State  string
		Labels map[string]string
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	cs := make([]container, 0, len(raw))
	for _, r := range raw {
		if len(r.Names) > 0 {
			cs = append(cs, container{Name: r.Names[0], State: r.State, Labels: r.Labels})
		}
	}
	return cs, nil
}

func (p *podman) state(ctx context.Context, name string) (string, error) {
	out, err := p.run(ctx, "inspect", "--format", "{{.State.Status}}", name)
	return strings.TrimSpace(out), err
}

func (p *podman) remove(ctx context.Context, name string) error {
	return p.removeWithin(ctx, name, 5)
}

// removeWithin stops the container (SIGTERM, then SIGKILL after grace seconds) and removes it.
func (p *podman) removeWithin(ctx context.Context, name string, grace int) error {
	_, err := p.run(ctx, "rm", "-f", "-t", strconv.Itoa(grace), name)
	return err
}

// wait blocks until the container exits and returns its exit code.
func (p *podman) wait(ctx context.Context, name string) (int, error) {
	out, err := p.run(ctx, "wait", name)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// logs returns the container's stdout and stderr separately (the last n lines each).
func (p *podman) logs(ctx context.Context, name string, n int) (stdout, stderr string) {
	cmd := exec.CommandContext(ctx, p.bin, append(append([]string{}, p.global...), "logs", "--tail", strconv.Itoa(n), name)...)
	cmd.Env = p.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Run()
	return o.String(), e.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
