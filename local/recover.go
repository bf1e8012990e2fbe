package local

import (
	"context"
	"fmt"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

// recover restores what the state file says after a start: every function is reconciled (running
// containers of this instance are adopted, missing ones started), jobs caught mid-run are attached
// to or marked failed, and containers of this instance that belong to nothing are removed.
func (p *Platform) recover(ctx context.Context) error {
	fns, err := p.functions.all()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for ns, list := range fns {
		for _, f := range list {
			known[ns+"/"+f.Name] = true
			p.queue.add("fn/" + ns + "/" + f.Name)
		}
	}
	jobs, err := p.jobs.all()
	if err != nil {
		return err
	}
	cs, err := p.podman.list(ctx, p.instance)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for _, c := range cs {
		names[c.Name] = true
	}
	for ns, list := range jobs {
		for _, j := range list {
			if j.Status.Phase != apiv1.JobRunning {
				p.queue.add("job/" + ns + "/" + j.Name)
				continue
			}
			cname := fmt.Sprintf("sless-job-%s-%s-%d", ns, j.Name, j.Status.LastRunID)
			ns, j := ns, j
			if !names[cname] {
				p.finishJob(ns, j.Name, j.Status.LastRunID, false, "interrupted: sless up stopped during the run; raise run_id to run again")
				continue
			}
			p.jobWG.Add(1)
			go func() {
				defer p.jobWG.Done()
				ok, msg, interrupted := p.runOnce(ctx, containerSpec{name: cname}, false)
				if !interrupted {
					p.finishJob(ns, j.Name, j.Status.LastRunID, ok, msg)
				}
			}()
		}
	}
	for _, c := range cs {
		if c.Labels[labelRole] == "cron" {
			// A cron run interrupted by the stop: it is not recorded, and the schedule goes on.
			p.podman.remove(ctx, c.Name)
			continue
		}
		if c.Labels[labelRole] == "function" && !known[c.Labels[labelNamespace]+"/"+c.Labels[labelFunction]] {
			p.log.Info("removing orphaned container", "container", c.Name)
			p.podman.remove(ctx, c.Name)
		}
	}
	return nil
}

// resync reconciles everything every 30 s, so a container that died is noticed and replaced.
func (p *Platform) resync(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fns, err := p.functions.all()
			if err != nil {
				continue
			}
			for ns, list := range fns {
				for _, f := range list {
					p.queue.add("fn/" + ns + "/" + f.Name)
				}
			}
		}
	}
}
