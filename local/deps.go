package local

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/sless-dev/sless/deps"
)

// depsResolver runs an installer as a one-shot container of the runtime image (host network, so it
// reaches the package index the platform is configured with).
type depsResolver struct{ p *Platform }

var _ deps.Resolver = depsResolver{}

// Resolve runs the installer; on failure the error carries its last lines.
func (r depsResolver) Resolve(ctx context.Context, s deps.Spec, in deps.Installer, inDir, outDir string) error {
	p := r.p
	name := fmt.Sprintf("sless-deps-%s-%d", p.instance, p.depsRuns.Add(1))
	args := []string{"run", "--rm", "--name", name, "--user", "0:0", "--label", labelInstance + "=" + p.instance, "--label", labelRole + "=deps",
		"-v", inDir + ":/in:ro", "-v", outDir + ":" + deps.OutDir, "-v", strings.TrimSuffix(outDir, "/out") + "/work:/work", "-w", "/work"}
	args = append(args, runFlags...)
	if ca := p.cfg.DepsCAFile; ca != "" {
		const inside = "/etc/sless/ca.crt"
		args = append(args, "-v", ca+":"+inside+":ro", "-e", "NODE_EXTRA_CA_CERTS="+inside, "-e", "npm_config_cafile="+inside, "-e", "PIP_CERT="+inside)
	}
	for _, e := range in.Env {
		args = append(args, "-e", e)
	}
	args = append(args, s.RuntimeImage)
	args = append(args, in.Argv...)
	out, err := p.podman.run(ctx, args...)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// 125–127 are podman's own failures (its storage, a pull, a name clash, no such command):
		// the platform's, retried; any other exit status is the installer's verdict on the
		// dependencies.
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() >= 125 && ee.ExitCode() <= 127 {
			return fmt.Errorf("running the dependency installer: %w", err)
		}
		return &deps.InstallError{Output: strings.TrimSpace(lastLines(out+"\n"+err.Error(), 15))}
	}
	return nil
}
