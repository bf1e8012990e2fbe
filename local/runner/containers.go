package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/runspec"
)

// envMount is where a container finds its private variables (runspec.EnvFile).
const envMount = "/run/sless-env"

// envDir holds the private variables and secret files of container name on the host: on a tmpfs
// (RunDir), so that no value a tenant gave is ever written to a disk.
func (r *Runner) envDir(name string) string { return filepath.Join(r.runDir, "env", name) }

// legacyEnvDir is where an earlier sless up kept them, under the data dir (CleanEnv removes it).
func (r *Runner) legacyEnvDir() string { return filepath.Join(r.dataDir, "env") }

// environment splits vars: the platform's go on podman's command line, the private ones (the
// user's env vars and secret values, a job's event) into a file only the function's user can
// read, mounted read-only, which the runtime loads (runspec.EnvFile); each of files (directory in
// the container → file name → content) becomes a read-only directory of such files. It returns
// the command-line variables and the volumes to mount.
func (r *Runner) environment(container string, hostID int, vars []runspec.EnvVar, files map[string]map[string]string) ([]podman.EnvVar, []string, error) {
	private := map[string]string{}
	var public []podman.EnvVar
	for _, v := range vars {
		if runspec.Private(v.Name) {
			private[v.Name] = v.Value
		} else {
			public = append(public, podman.EnvVar{Name: v.Name, Value: v.Value})
		}
	}
	dir := r.envDir(container)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(private)
	if err != nil {
		return nil, nil, err
	}
	// Owned by the function's user: readable by it, by nobody else (and writable by no one).
	owned := func(path string, data []byte) error {
		if err := os.WriteFile(path, data, 0o400); err != nil {
			return err
		}
		return os.Chown(path, hostID, hostID)
	}
	if err := owned(filepath.Join(dir, "env.json"), b); err != nil {
		return nil, nil, err
	}
	// The same as a shell file, for the provided runtime (a bootstrap in any language).
	if err := owned(filepath.Join(dir, "env.sh"), runspec.ShellEnv(private)); err != nil {
		return nil, nil, err
	}
	volumes := []string{dir + ":" + envMount + ":ro"}
	// Sorted: the same files make the same mounts in the same order.
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		// Beside env.json, not in its directory: each mount shows the container its own files only.
		fdir := filepath.Join(r.envDir(container)+".files", strconv.Itoa(i))
		if i == 0 {
			os.RemoveAll(filepath.Dir(fdir))
		}
		if err := os.MkdirAll(fdir, 0o700); err != nil {
			return nil, nil, err
		}
		for name, content := range files[p] {
			if err := owned(filepath.Join(fdir, name), []byte(content)); err != nil {
				return nil, nil, err
			}
		}
		if err := errors.Join(os.Chown(fdir, hostID, hostID), os.Chmod(fdir, 0o500)); err != nil {
			return nil, nil, err
		}
		volumes = append(volumes, fdir+":"+p+":ro")
	}
	if err := errors.Join(os.Chown(dir, hostID, hostID), os.Chmod(dir, 0o500)); err != nil {
		return nil, nil, err
	}
	public = append(public, podman.EnvVar{Name: runspec.EnvFile, Value: envMount + "/env.json"},
		podman.EnvVar{Name: runspec.EnvShellFile, Value: envMount + "/env.sh"})
	return public, volumes, nil
}

// dropEnv removes what environment wrote for container name.
func (r *Runner) dropEnv(name string) {
	os.RemoveAll(r.envDir(name))
	os.RemoveAll(r.envDir(name) + ".files")
}

// remove removes a container and what the runner kept for it, and stops counting it.
func (r *Runner) remove(ctx context.Context, name string, grace int) error {
	err := r.clear(ctx, name, grace)
	r.ledger.release(name)
	r.mu.Lock()
	if r.stopping[name]--; r.stopping[name] <= 0 {
		delete(r.stopping, name)
	}
	r.mu.Unlock()
	return err
}

// marked counts a removal of name as pending (remove counts it down).
func (r *Runner) marked(name string) {
	r.mu.Lock()
	r.stopping[name]++
	r.mu.Unlock()
}

// clear removes a leftover container of the name a new one is about to take (its booking, if
// any, is the new one's).
func (r *Runner) clear(ctx context.Context, name string, grace int) error {
	err := r.pm.Remove(ctx, name, grace)
	if r.unregister != nil && err == nil {
		r.unregister(name)
	}
	r.dropEnv(name)
	r.stoppedLog(name)
	return err
}

// CleanEnv removes the private variables of containers that are gone (keep: the names that run),
// and what an earlier sless up kept under the data dir. Those written in the last minute stay:
// the controller, already at work, may be starting their container right now.
func (r *Runner) CleanEnv(keep map[string]bool) {
	entries, _ := os.ReadDir(filepath.Join(r.runDir, "env"))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".files")
		if info, err := e.Info(); keep[name] || (err == nil && time.Since(info.ModTime()) < time.Minute) {
			continue
		}
		os.RemoveAll(filepath.Join(r.runDir, "env", e.Name()))
	}
	// A running container of an earlier version read its variables when it started.
	os.RemoveAll(r.legacyEnvDir())
}

// Remove removes a container of this instance (and its private variables).
func (r *Runner) Remove(ctx context.Context, name string, grace int) error {
	return r.remove(ctx, name, grace)
}

// Serve runs (or adopts) instance 0 of the function's version and waits until its health check
// answers: a new version must start and pass it before it serves. It does not switch /fn/ to it
// (Switch does).
func (r *Runner) Serve(ctx context.Context, f Function) (*Instance, error) {
	cname := r.ContainerName(f)
	r.mu.RLock()
	busy := r.stopping[cname] > 0
	r.mu.RUnlock()
	if busy {
		// A container of this name (this version, switched away from a moment ago) is still
		// finishing its requests: neither adopt it nor start one of its name until it is gone.
		return nil, fmt.Errorf("the previous container %s of this version is still stopping", cname)
	}
	if cs, err := r.List(ctx); err == nil {
		if inst := r.adopt(ctx, cs, cname); inst != nil {
			r.ledger.note(cname, booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: cname})
			return inst, nil
		}
	}
	var inst *Instance
	err := r.start(ctx, f, cname, true, func(u *url.URL) { inst = &Instance{Name: cname, URL: u} })
	return inst, err
}

// start runs container cname of f, calls addressed with its address as soon as it has one, and
// waits for its health check. An error leaves nothing behind.
func (r *Runner) start(ctx context.Context, f Function, cname string, first bool, addressed func(*url.URL)) error {
	bk := booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: versionOf(cname), replaces: first}
	if err := r.ledger.reserve(ctx, cname, bk, false); err != nil {
		return err
	}
	spec, err := r.functionSpec(f, cname)
	if err == nil {
		err = r.identify(ctx, &spec, f.Namespace)
	}
	if err != nil {
		r.dropEnv(cname)
		r.ledger.release(cname)
		return err
	}
	id, err := r.pm.Start(ctx, spec)
	if err != nil && strings.Contains(err.Error(), "already in use") {
		// A leftover of the same name (stopped, or on another network): removed only now, so
		// that the usual start costs no `podman rm` (about 150 ms).
		r.pm.Remove(ctx, cname, 5)
		id, err = r.pm.Start(ctx, spec)
	}
	if err != nil {
		r.dropEnv(cname)
		r.ledger.release(cname)
		return fmt.Errorf("starting the container: %w", err)
	}
	r.ledger.started(cname)
	return r.healthy(ctx, cname, strings.TrimSpace(id), addressed)
}

// startSpare starts the spare container cname (ID id) of f, as start does; if podman cannot
// (removed by hand meanwhile), it runs the container anew.
func (r *Runner) startSpare(ctx context.Context, f Function, cname, id string, addressed func(*url.URL)) error {
	bk := booking{ns: f.Namespace, fn: f.Name, role: runspec.RoleFunction, mb: f.MemoryMB, version: versionOf(cname)}
	if err := r.ledger.reserve(ctx, cname, bk, false); err != nil {
		return err
	}
	if _, err := r.pm.Run(ctx, "start", cname); err != nil {
		r.clear(ctx, cname, 0)
		r.ledger.release(cname)
		return r.start(ctx, f, cname, false, addressed)
	}
	r.ledger.started(cname)
	return r.healthy(ctx, cname, id, addressed)
}

// functionSpec is how container cname of f runs; its private variables are written for it.
func (r *Runner) functionSpec(f Function, cname string) (podman.Spec, error) {
	labels := map[string]string{runspec.LabelInstance: r.instance, runspec.LabelNamespace: f.Namespace, runspec.LabelFunction: f.Name,
		runspec.LabelPort: strconv.Itoa(runspec.Port), runspec.LabelRole: string(runspec.RoleFunction), labelMemory: strconv.Itoa(f.MemoryMB)}
	env, volumes, err := r.environment(cname, f.hostID(), append(runspec.Env(f.instance()), f.secretVars()...), f.SecretFiles)
	if err != nil {
		return podman.Spec{}, err
	}
	logs, err := r.logFlags(f.Namespace, f.Name, cname)
	if err != nil {
		return podman.Spec{}, err
	}
	return podman.Spec{Name: cname, Image: f.Image, Labels: labels, Env: env, Volumes: volumes,
		Detach: true, MemoryMB: f.MemoryMB, Confined: true, Network: r.network, IDBase: f.IDBase, Flags: logs}, nil
}

// healthy learns started container cname's address (ID id), hands it to addressed and waits for
// its health check; a container that fails it is removed, with its last output in the error.
func (r *Runner) healthy(ctx context.Context, cname, id string, addressed func(*url.URL)) error {
	inst, err := r.addressOf(ctx, cname, id, runspec.Port)
	if err == nil {
		addressed(inst.URL)
		err = r.waitHealthy(ctx, inst)
	}
	if err != nil {
		stdout, stderr := r.pm.Logs(ctx, cname, 20)
		r.remove(context.WithoutCancel(ctx), cname, 5)
		return fmt.Errorf("%v; last output:\n%s", err, strings.TrimSpace(podman.LastLines(stderr+stdout, 15)))
	}
	return nil
}

// SetAddresses gives the runner a faster way to learn a new container's address than asking
// podman: lookup returns the address recorded for a container ID (local/network's IPAM store).
func (r *Runner) SetAddresses(lookup func(id string) (netip.Addr, bool)) { r.lookup = lookup }

// addressOf is container cname (ID id) as /fn/ reaches it: from the address lookup, else podman.
func (r *Runner) addressOf(ctx context.Context, cname, id string, port int) (*Instance, error) {
	if r.lookup != nil {
		if ip, ok := r.lookup(id); ok {
			return &Instance{Name: cname, URL: &url.URL{Scheme: "http", Host: netip.AddrPortFrom(ip, uint16(port)).String()}}, nil
		}
	}
	return r.instanceOf(ctx, cname, port)
}

// instanceOf is container cname as /fn/ reaches it: its address on the runner's network.
func (r *Runner) instanceOf(ctx context.Context, cname string, port int) (*Instance, error) {
	ip, err := r.pm.IP(ctx, cname, r.network)
	if err != nil {
		return nil, err
	}
	return &Instance{Name: cname, URL: &url.URL{Scheme: "http", Host: netip.AddrPortFrom(ip, uint16(port)).String()}}, nil
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

func healthy(ctx context.Context, inst *Instance) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, inst.URL.String()+runspec.HealthPath, nil)
	resp, err := healthClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitHealthy polls the health check until it answers, the container exits, or 60 s pass.
func (r *Runner) waitHealthy(ctx context.Context, inst *Instance) error {
	deadline := time.Now().Add(60 * time.Second)
	lastState := time.Now()
	for time.Now().Before(deadline) {
		if healthy(ctx, inst) {
			return nil
		}
		if time.Since(lastState) > 500*time.Millisecond {
			lastState = time.Now()
			if st, err := r.pm.State(ctx, inst.Name); err == nil && st != "running" && st != "created" {
				return fmt.Errorf("the function exited at start (%s)", st)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("the function did not answer its health check (GET %s on port %d, $PORT) within 60 s", runspec.HealthPath, runspec.Port)
}

// RemoveWhere removes this instance's containers that match, each within grace seconds.
func (r *Runner) RemoveWhere(ctx context.Context, grace int, match func(Container) bool) {
	cs, err := r.List(ctx)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		if !match(c) {
			continue
		}
		r.marked(c.Name) // no new container takes the name until this one is gone
		wg.Add(1)
		go func() { // at once: each may take its whole grace
			defer wg.Done()
			r.remove(ctx, c.Name, grace)
		}()
	}
	wg.Wait()
}
