package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/runspec"
)

// Run is one job or cron run.
type Run struct {
	// Container names the run; a restart of sless up attaches to it by this name.
	Container string
	Function  Function
	Role      runspec.Role
	Job       string // the job's name (RoleJob)
	Event     string // the event, JSON text
}

// Outcome is how a run ended.
type Outcome struct {
	OK bool
	// Message is the result (the handler's JSON) or the error.
	Message string
	// Interrupted: ctx ended first (sless up is stopping); the container was left running and the
	// next start attaches to it (Attach).
	Interrupted bool
}

// RunOnce runs a job-mode container to completion. It takes over the run's booking (Reserve), or
// books it: a run beyond its namespace's limits ends at once with the *QuotaError's message.
func (r *Runner) RunOnce(ctx context.Context, run Run) Outcome {
	resultDir := r.resultDir(run.Container)
	r.clear(context.WithoutCancel(ctx), run.Container, 5)
	if err := r.ledger.reserve(ctx, run.Container, runBooking(run), true); err != nil {
		return Outcome{Message: err.Error()}
	}
	os.RemoveAll(resultDir)
	// Job mode writes its result (or error) to TERMINATION_LOG, as on Kubernetes; a host directory
	// mounted there hands it over without depending on the log pipeline.
	if err := os.MkdirAll(resultDir, 0o700); err != nil {
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	os.Chown(resultDir, run.Function.hostID(), run.Function.hostID()) // the function's user, in its tenant's range
	labels := map[string]string{runspec.LabelInstance: r.instance, runspec.LabelNamespace: run.Function.Namespace,
		runspec.LabelFunction: run.Function.Name, runspec.LabelRole: string(run.Role), labelMemory: strconv.Itoa(run.Function.MemoryMB)}
	if run.Job != "" {
		labels[runspec.LabelJob] = run.Job
	}
	vars := append(runspec.JobEnv(run.Function.instance(), run.Event), runspec.EnvVar{Name: runspec.EnvTerminationLog, Value: "/run/sless/result"})
	env, volumes, err := r.environment(run.Container, run.Function.hostID(), append(vars, run.Function.secretVars()...), run.Function.SecretFiles)
	if err != nil {
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	// Its output is capped as a function instance's is (logCapFlags): it is tenant code's.
	spec := podman.Spec{Name: run.Container, Image: run.Function.Image, Labels: labels, Env: env, Detach: true,
		MemoryMB: run.Function.MemoryMB, Volumes: append([]string{resultDir + ":/run/sless"}, volumes...), Confined: true, Network: r.network,
		IDBase: run.Function.IDBase, Flags: logCapFlags()}
	if err := r.identify(ctx, &spec, run.Function.Namespace); err != nil {
		r.dropEnv(run.Container)
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	if _, err := r.pm.Start(context.WithoutCancel(ctx), spec); err != nil {
		r.dropEnv(run.Container)
		r.ledger.release(run.Container)
		return Outcome{Message: err.Error()}
	}
	r.ledger.started(run.Container)
	return r.Attach(ctx, run.Container)
}

// Attach waits for a started run to end (after a restart of sless up too) and returns its outcome:
// the result it wrote, else the last line it printed, or its error output, clipped to
// runspec.MaxResultBytes (runspec.ClipMessage) as Kubernetes clips a termination message.
func (r *Runner) Attach(ctx context.Context, container string) Outcome {
	out := r.attach(ctx, container)
	out.Message = runspec.ClipMessage(out.Message)
	return out
}

func (r *Runner) attach(ctx context.Context, container string) Outcome {
	code, err := r.pm.Wait(ctx, container)
	if ctx.Err() != nil {
		return Outcome{Interrupted: true}
	}
	resultDir := r.resultDir(container)
	defer os.RemoveAll(resultDir)
	result, rerr := ReadResult(filepath.Join(resultDir, "result"))
	stdout, stderr := r.pm.Logs(ctx, container, 50)
	// conmon may still be writing the log when wait returns (seen under load): a successful run
	// always prints its result, so give an empty log a moment.
	for i := 0; err == nil && code == 0 && len(result) == 0 && strings.TrimSpace(stdout) == "" && i < 20; i++ {
		time.Sleep(100 * time.Millisecond)
		stdout, stderr = r.pm.Logs(ctx, container, 50)
	}
	r.remove(ctx, container, 5)
	if err != nil {
		return Outcome{Message: err.Error()}
	}
	if rerr != nil {
		return Outcome{Message: "the run's result could not be read: " + rerr.Error()}
	}
	if code != 0 {
		if msg := strings.TrimSpace(podman.LastLines(stderr, 10)); msg != "" {
			return Outcome{Message: msg}
		}
		return Outcome{Message: strings.TrimSpace(result)}
	}
	if len(result) > 0 {
		return Outcome{OK: true, Message: strings.TrimSpace(result)}
	}
	return Outcome{OK: true, Message: strings.TrimSpace(podman.LastLines(stdout, 1))}
}

func (r *Runner) resultDir(container string) string {
	return filepath.Join(r.dataDir, "results", container)
}

// ErrNotRegular says a run's result is not a regular file (a symlink, a FIFO, a device).
var ErrNotRegular = errors.New("the result is not a regular file")

// ReadResult reads what a container wrote as its result without trusting it: the last path
// element is not followed if it is a symlink, a FIFO or device never blocks the read (non-blocking
// open, regular files only), and at most runspec.MaxResultBytes are read (a huge or sparse file
// costs nothing). A missing file is an empty result.
func ReadResult(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return "", ErrNotRegular
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", ErrNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, runspec.MaxResultBytes))
	return string(b), err
}
