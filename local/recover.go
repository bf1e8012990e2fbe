package local

import (
	"context"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/runspec"
)

// recover restores what the state file says after a start: every object is reconciled (running
// containers of this instance are adopted, missing ones started), jobs caught mid-run are attached
// to or marked failed, and containers of this instance that belong to nothing are removed.
func (c *controller) recover(ctx context.Context) error {
	p := c.p
	fns, err := p.db.Functions.All()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	var adopt []runner.Function
	for ns, list := range fns {
		for _, f := range list {
			known[ns+"/"+f.Spec.Name] = true
			// A container that runs this function's current build serves at once: /fn/ answers from
			// the moment the platform is ready, before the controller gets to the function.
			if f.Status.Image != "" && f.Spec.CodeSHA256 != "" {
				if rf, err := p.runnerFunction(ctx, ns, f.Spec, f.Status.Image); err == nil {
					adopt = append(adopt, rf)
				}
			}
		}
	}
	p.run.Adopt(ctx, adopt)
	// After the adoptions: a reconcile must see what was adopted, not start a second container.
	if err := c.enqueueAll(); err != nil {
		return err
	}
	jobs, err := p.db.Jobs.All()
	if err != nil {
		return err
	}
	cs, err := p.run.List(ctx)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, ct := range cs {
		names[ct.Name] = true
	}
	for ns, list := range jobs {
		for _, j := range list {
			if j.Status.Phase != apiv1.JobRunning {
				continue
			}
			ns, name, runID := ns, j.Spec.Name, j.Status.LastRunID
			cname := jobContainer(ns, name, runID)
			if !names[cname] {
				c.finishJob(ns, name, runID, runnerOutcome(false, "interrupted: sless up stopped during the run; raise run_id to run again"))
				continue
			}
			c.runs.Add(1)
			go func() {
				defer c.runs.Done()
				if out := p.run.Attach(ctx, cname); !out.Interrupted {
					c.finishJob(ns, name, runID, out)
				}
			}()
		}
	}
	p.run.CleanEnv(names)
	for _, ct := range cs {
		switch {
		case ct.Labels[runspec.LabelRole] == string(runspec.RoleCron):
			// A cron run interrupted by the stop: it is not recorded, and the schedule goes on.
			p.run.Remove(ctx, ct.Name, 5)
		case ct.Labels[runspec.LabelRole] == string(runspec.RoleFunction) && !known[ct.Labels[runspec.LabelNamespace]+"/"+ct.Labels[runspec.LabelFunction]]:
			p.log.Info("removing orphaned container", "container", ct.Name)
			p.run.Remove(ctx, ct.Name, 5)
		}
	}
	return nil
}

func runnerOutcome(ok bool, msg string) runner.Outcome { return runner.Outcome{OK: ok, Message: msg} }
