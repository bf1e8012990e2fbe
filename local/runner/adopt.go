package runner

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"

	"github.com/sless-dev/sless/runspec"
)

// Adopt routes /fn/ to each function's running containers that answer their health check (after
// a restart of sless up, before the platform reports ready): every instance of its version, so a
// scaled-out function keeps its scale, else one an earlier version started (adoptPrevious). One
// listing of the containers serves them all.
func (r *Runner) Adopt(ctx context.Context, fs []Function) {
	cs, err := r.List(ctx)
	if err != nil {
		return
	}
	for _, f := range fs {
		version := r.ContainerName(f)
		var insts []*Instance
		spare, spareID := "", ""
		for _, c := range cs {
			if !ofVersion(c.Name, version) {
				continue
			}
			if c.State == "created" && spare == "" && slices.Contains(c.Networks, r.network) {
				spare, spareID = c.Name, c.ID
			} else if inst := r.adopt(ctx, cs, c.Name); inst != nil {
				insts = append(insts, inst)
			}
		}
		if len(insts) == 0 {
			if inst := r.adoptPrevious(ctx, cs, f); inst != nil {
				r.Switch(f, inst)
			}
			continue
		}
		r.Switch(f, insts[0])
		r.mu.Lock()
		p := r.pools[f.Namespace+"/"+f.Name]
		p.ready = append(p.ready, insts[1:]...)
		p.spare, p.spareID = spare, spareID
		r.mu.Unlock()
	}
}

// adoptPrevious serves f, for now, from a running container of f that an earlier version
// started otherwise — on the host's network (reached on 127.0.0.1:<port>), or without the
// tenant's uid range: Current is false for it, so the controller starts f's container beside it
// and switches without a failed request.
func (r *Runner) adoptPrevious(ctx context.Context, cs []Container, f Function) *Instance {
	for _, c := range cs {
		if c.State != "running" || c.Labels[runspec.LabelRole] != string(runspec.RoleFunction) ||
			c.Labels[runspec.LabelNamespace] != f.Namespace || c.Labels[runspec.LabelFunction] != f.Name {
			continue
		}
		port, err := strconv.Atoi(c.Labels[runspec.LabelPort])
		if err != nil {
			continue
		}
		var inst *Instance
		switch {
		case len(c.Networks) == 0:
			inst = &Instance{Name: c.Name, URL: &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}}
		case slices.Contains(c.Networks, r.network):
			if inst, err = r.instanceOf(ctx, c.Name, port); err != nil {
				continue
			}
		default:
			continue
		}
		inst.stale = true
		if r.waitHealthy(ctx, inst) != nil {
			continue
		}
		// Its replacement takes the name.
		if c.Name == r.ContainerName(f) {
			inst.Name = c.Name + "-previous"
			if _, err := r.pm.Run(ctx, "rename", c.Name, inst.Name); err != nil {
				return nil
			}
			os.Rename(r.envDir(c.Name), r.envDir(inst.Name))
			os.Rename(r.envDir(c.Name)+".files", r.envDir(inst.Name)+".files")
			r.ledger.rename(c.Name, inst.Name)
		}
		return inst
	}
	return nil
}

// adopt takes over a running container of this name (after a restart of sless up). A running
// container is never removed for answering its health check slowly: a busy handler can stall it.
func (r *Runner) adopt(ctx context.Context, cs []Container, cname string) *Instance {
	for _, c := range cs {
		if c.Name == cname && c.State == "running" && slices.Contains(c.Networks, r.network) {
			port, err := strconv.Atoi(c.Labels[runspec.LabelPort])
			if err != nil {
				return nil
			}
			inst, err := r.instanceOf(ctx, cname, port)
			if err != nil {
				return nil
			}
			if r.waitHealthy(ctx, inst) == nil {
				return inst
			}
		}
	}
	return nil
}
