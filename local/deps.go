package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/runspec"
)

// depsResolver runs an installer as a one-shot container of the runtime image on the instance's
// deps network, whose only way out is the index proxy on its gateway.
type depsResolver struct {
	p    *Platform
	runs atomic.Int64
}

var _ deps.Resolver = (*depsResolver)(nil)

// Limits of one dependency install: it runs the tenant's code (setup.py, npm scripts).
const (
	depsTimeout  = 10 * time.Minute
	depsMemoryMB = 1536
	// depsScratch bounds /work (pip's unpacked downloads, npm's cache), a tmpfs: the root
	// filesystem here is ext4, so podman's --storage-opt size= cannot bound it.
	depsScratch = "1g"
)

// Resolve runs the installer; on failure the error carries its last lines. The installer runs as
// the function's non-root user, confined like a function, with memory, process and scratch
// limits and a deadline; only /out (the layer to be) is written to the host.
func (r *depsResolver) Resolve(ctx context.Context, s deps.Spec, in deps.Installer, inDir, outDir string) error {
	p := r.p
	ctx, cancel := context.WithTimeout(ctx, depsTimeout)
	defer cancel()
	// In the tenant's uid range, as its functions: an install's processes count against no one
	// else's limits. (A shared key is installed in the range of the tenant that asked first.)
	base, err := p.uids.base(ctx, s.Namespace)
	if err != nil {
		return err
	}
	hostID := int(base) + runspec.UID
	if err := os.Chown(outDir, hostID, hostID); err != nil { // the installer's only writable host dir
		return err
	}
	name := fmt.Sprintf("sless-deps-%s-%d", p.instance, r.runs.Add(1))
	spec := podman.Spec{Name: name, Image: s.RuntimeImage, Remove: true, User: fmt.Sprintf("%d:%d", runspec.UID, runspec.GID),
		Labels:  map[string]string{runspec.LabelInstance: p.instance, runspec.LabelNamespace: s.Namespace, runspec.LabelRole: string(runspec.RoleDeps)},
		Volumes: []string{inDir + ":/in:ro", outDir + ":" + deps.OutDir}, Confined: true, MemoryMB: depsMemoryMB,
		Flags:   []string{"--tmpfs", "/work:rw,nosuid,nodev,size=" + depsScratch + ",mode=1777"},
		WorkDir: "/work", Command: in.Argv, Network: p.nets.Deps.Name, IDBase: base, Env: []podman.EnvVar{{Name: "TMPDIR", Value: "/work"}}}
	proxy := "http://" + p.proxy.Addr()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "npm_config_proxy", "npm_config_https_proxy"} {
		spec.Env = append(spec.Env, podman.EnvVar{Name: k, Value: proxy})
	}
	// Nothing bypasses it (an index on the host's loopback is reached through it too).
	spec.Env = append(spec.Env, podman.EnvVar{Name: "NO_PROXY", Value: ""}, podman.EnvVar{Name: "no_proxy", Value: ""})
	if ca := p.cfg.DepsCAFile; ca != "" {
		const inside = "/etc/sless/ca.crt"
		spec.Volumes = append(spec.Volumes, ca+":"+inside+":ro")
		spec.Env = append(spec.Env, podman.EnvVar{Name: "NODE_EXTRA_CA_CERTS", Value: inside}, podman.EnvVar{Name: "npm_config_cafile", Value: inside},
			podman.EnvVar{Name: "PIP_CERT", Value: inside})
	}
	for _, e := range in.Env {
		k, v, _ := strings.Cut(e, "=")
		spec.Env = append(spec.Env, podman.EnvVar{Name: k, Value: v})
	}
	out, err := p.pm.Start(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			// The podman client was killed; the container is not: remove it.
			p.pm.Remove(context.WithoutCancel(ctx), name, 0)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the dependency install did not finish within %v", depsTimeout)
			}
			return ctx.Err()
		}
		// Podman's own failures (its storage, a pull, a name clash) are the platform's, retried;
		// any other exit status is the installer's verdict on the dependencies.
		if ee, ok := errors.AsType[*podman.ExitError](err); ok && !ee.PodmanFailed() {
			return &deps.InstallError{Output: strings.TrimSpace(podman.LastLines(out+"\n"+ee.Stderr, 15))}
		}
		return fmt.Errorf("running the dependency installer: %w", err)
	}
	if s.Log != nil {
		io.WriteString(s.Log, podman.LastLines(out, 50))
	}
	return nil
}
