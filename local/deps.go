package local

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/runspec"
)

// depsResolver runs an installer as a one-shot container of the runtime image (host network, so it
// reaches the package index the platform is configured with).
type depsResolver struct {
	p    *Platform
	runs atomic.Int64
}

var _ deps.Resolver = (*depsResolver)(nil)

// Resolve runs the installer; on failure the error carries its last lines.
func (r *depsResolver) Resolve(ctx context.Context, s deps.Spec, in deps.Installer, inDir, outDir string) error {
	p := r.p
	spec := podman.Spec{Name: fmt.Sprintf("sless-deps-%s-%d", p.instance, r.runs.Add(1)), Image: s.RuntimeImage, Remove: true, User: "0:0",
		Labels:  map[string]string{runspec.LabelInstance: p.instance, runspec.LabelRole: string(runspec.RoleDeps)},
		Volumes: []string{inDir + ":/in:ro", outDir + ":" + deps.OutDir, strings.TrimSuffix(outDir, "/out") + "/work:/work"},
		WorkDir: "/work", Command: in.Argv}
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
			return ctx.Err()
		}
		// Podman's own failures (its storage, a pull, a name clash) are the platform's, retried;
		// any other exit status is the installer's verdict on the dependencies.
		if ee, ok := errors.AsType[*podman.ExitError](err); ok && !ee.PodmanFailed() {
			return &deps.InstallError{Output: strings.TrimSpace(podman.LastLines(out+"\n"+ee.Stderr, 15))}
		}
		return fmt.Errorf("running the dependency installer: %w", err)
	}
	return nil
}
