package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

// enqueueJobsOf reconciles the jobs of a function that just got a new image.
func (p *Platform) enqueueJobsOf(ns, fname string) {
	js, err := p.jobs.List(context.Background(), ns)
	if err != nil {
		return
	}
	for _, j := range js {
		if j.FunctionRef == fname {
			p.queue.add("job/" + ns + "/" + j.Name)
		}
	}
}

// reconcileJob starts a run when run_id is above the last run (the seed's rule; 0 never runs).
func (p *Platform) reconcileJob(ctx context.Context, ns, jname string) error {
	job, err := p.jobs.Get(ctx, ns, jname)
	if errors.Is(err, api.ErrNotFound) {
		p.removeContainers(ctx, func(c container) bool {
			return c.Labels[labelRole] == "job" && c.Labels[labelNamespace] == ns && c.Labels["dev.sless.job"] == jname
		})
		return nil
	}
	if err != nil || job.RunID == 0 || job.RunID <= job.Status.LastRunID {
		return err
	}
	fn, err := p.functions.Get(ctx, ns, job.FunctionRef)
	bs, _ := getBuild(p.db, ns, job.FunctionRef)
	if err != nil || bs.Image == "" {
		_, err := p.jobs.Update(ctx, ns, jname, func(j *apiv1.Job) error {
			j.Status.Phase, j.Status.Message = apiv1.JobPending, fmt.Sprintf("waiting for function %q to be built", job.FunctionRef)
			return nil
		})
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	runID := job.RunID
	if _, err := p.jobs.Update(ctx, ns, jname, func(j *apiv1.Job) error {
		j.Status = apiv1.JobStatus{Phase: apiv1.JobRunning, LastRunID: runID, StartTime: &now}
		return nil
	}); err != nil {
		return err
	}
	cname := fmt.Sprintf("sless-job-%s-%s-%d", ns, jname, runID)
	env := runEnv(fn)
	env["JOB_MODE"] = "1"
	env["EVENT_JSON"] = orEmptyObject(job.EventJSON)
	labels := map[string]string{labelInstance: p.instance, labelNamespace: ns, labelFunction: fn.Name, labelRole: "job", "dev.sless.job": jname}
	p.jobWG.Add(1)
	go func() {
		defer p.jobWG.Done()
		ok, msg, interrupted := p.runOnce(ctx, containerSpec{name: cname, image: bs.Image, labels: labels, env: env, detach: true, memoryMB: fn.MemoryMB}, true)
		if !interrupted {
			p.finishJob(ns, jname, runID, ok, msg)
		}
	}()
	return nil
}

func (p *Platform) finishJob(ns, jname string, runID int64, ok bool, msg string) {
	done := time.Now().UTC().Truncate(time.Second)
	p.jobs.Update(context.Background(), ns, jname, func(j *apiv1.Job) error {
		if j.Status.LastRunID != runID {
			return nil // a newer run took over
		}
		j.Status.Phase = apiv1.JobFailed
		if ok {
			j.Status.Phase = apiv1.JobSucceeded
		}
		j.Status.Message, j.Status.CompletionTime = msg, &done
		return nil
	})
}

// runOnce runs a job-mode container to completion (or attaches to it after a restart) and returns
// whether it succeeded and its message: the result (last stdout line) or the error (stderr tail).
//
// When ctx ends first (sless up is stopping), interrupted is true and the container is left running:
// the next start re-attaches to it (recover).
func (p *Platform) runOnce(ctx context.Context, spec containerSpec, start bool) (ok bool, msg string, interrupted bool) {
	cname := spec.name
	// Job mode writes its result (or error) to TERMINATION_LOG, as on Kubernetes; a host directory
	// mounted there hands it over without depending on the log pipeline.
	resultDir := filepath.Join(p.cfg.DataDir, "results", cname)
	if start {
		p.podman.remove(context.WithoutCancel(ctx), cname)
		os.RemoveAll(resultDir)
		if err := os.MkdirAll(resultDir, 0o777); err == nil {
			os.Chmod(resultDir, 0o777) // the function runs as 65532
			spec.volumes = append(spec.volumes, resultDir+":/run/sless")
			spec.env["TERMINATION_LOG"] = "/run/sless/result"
		}
		if err := p.podman.start(context.WithoutCancel(ctx), spec); err != nil {
			return false, err.Error(), false
		}
	}
	code, err := p.podman.wait(ctx, cname)
	if ctx.Err() != nil {
		return false, "", true
	}
	defer os.RemoveAll(resultDir)
	result, _ := os.ReadFile(filepath.Join(resultDir, "result"))
	stdout, stderr := p.podman.logs(ctx, cname, 50)
	// conmon may still be writing the log when wait returns (seen under load): a successful run
	// always prints its result, so give an empty log a moment.
	for i := 0; err == nil && code == 0 && len(result) == 0 && strings.TrimSpace(stdout) == "" && i < 20; i++ {
		time.Sleep(100 * time.Millisecond)
		stdout, stderr = p.podman.logs(ctx, cname, 50)
	}
	p.podman.remove(ctx, cname)
	if err != nil {
		return false, err.Error(), false
	}
	if code != 0 {
		if msg := strings.TrimSpace(lastLines(stderr, 10)); msg != "" {
			return false, msg, false
		}
		return false, strings.TrimSpace(string(result)), false
	}
	if len(result) > 0 {
		return true, strings.TrimSpace(string(result)), false
	}
	return true, strings.TrimSpace(lastLines(stdout, 1)), false
}

func (p *Platform) removeContainers(ctx context.Context, match func(container) bool) {
	cs, err := p.podman.list(ctx, p.instance)
	if err != nil {
		return
	}
	for _, c := range cs {
		if match(c) {
			p.podman.remove(ctx, c.Name)
		}
	}
}

func orEmptyObject(s string) string {
	if s == "" {
		return "{}"
	}
	return s
}

// cronEvent is the event a cron run gets (DESIGN.md §5).
func cronEvent(trigger string, at time.Time) string {
	b, _ := json.Marshal(map[string]string{"source": "cron", "trigger": trigger, "scheduled_time": at.UTC().Format(time.RFC3339)})
	return string(b)
}
