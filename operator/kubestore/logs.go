package kubestore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// FunctionContainer is the container of a function pod whose output is the function's log.
const FunctionContainer = "function"

// Logs is objects.Logs on the cluster: a function's pods (read through the kubelet, stdout and stderr
// merged as Kubernetes keeps them) and the logs of its stopped pods the controller kept in the
// code store (fnlog.StoppedKey, for fnlog.KeepStopped).
type Logs struct {
	// Pods lists pods and streams their logs. A clientset of its own (its own rate limiter):
	// followers looking for new pods every second must not slow the API's other calls.
	Pods kubernetes.Interface
	Code codestore.Store
	// Poll is how often a followed pod that has not started yet (or whose container restarts) is
	// looked at again (default 1 s).
	Poll time.Duration
}

var _ objects.Logs = (*Logs)(nil)

// Pod log clients' rate limits: followers look for new pods every second.
const (
	logsQPS   = 50
	logsBurst = 100
)

// NewLogs reads function pods' logs with a clientset of its own made from cfg (QPS 50, burst
// 100): its rate limiter does not slow the API's or the reconcilers' calls; code holds the logs of
// stopped pods.
func NewLogs(cfg *rest.Config, code codestore.Store) (*Logs, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = logsQPS, logsBurst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the pod logs client: %w", err)
	}
	return &Logs{Pods: cs, Code: code}, nil
}

// functionPods selects a function's serving pods (not its deps, job or cron pods).
func functionPods(name string) string {
	return labels.SelectorFromSet(runspec.Labels(name, runspec.RoleFunction)).String()
}

// LogInstances lists the function's pods and its stopped pods' kept logs (younger than
// fnlog.KeepStopped); a pod that is both is listed live.
func (l *Logs) LogInstances(ctx context.Context, ns, name string) ([]objects.LogInstance, error) {
	pods, err := l.Pods.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: functionPods(name)})
	if err != nil {
		return nil, err
	}
	var out []objects.LogInstance
	live := map[string]bool{}
	for _, p := range pods.Items {
		live[p.Name] = true
		out = append(out, objects.LogInstance{ID: p.Name})
	}
	kept, err := l.Code.List(ctx, fnlog.StoppedPrefix(ns, name))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, o := range kept {
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, fnlog.StoppedPrefix(ns, name)), ".ndjson")
		if !ok || id == "" || strings.Contains(id, "/") || live[id] || now.Sub(o.Modified) >= fnlog.KeepStopped {
			continue // the collector deletes it soon
		}
		out = append(out, objects.LogInstance{ID: id, Stopped: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ReadLog reads a pod's log through the kubelet, or a stopped pod's kept lines.
func (l *Logs) ReadLog(ctx context.Context, ns, name string, inst objects.LogInstance, q objects.LogQuery, emit func(apiv1.LogLine) error) error {
	if inst.Stopped {
		return l.readKept(ctx, ns, name, inst.ID, q, emit)
	}
	return l.readPod(ctx, ns, name, inst.ID, q, true, emit)
}

// FollowPod emits every line of a function pod's log from its first as it comes, until the pod
// is done (being deleted, or its phase final) and its function container has ended, or ctx ends:
// what the controller keeps of a stopping pod.
func (l *Logs) FollowPod(ctx context.Context, ns, name, pod string, emit func(apiv1.LogLine) error) error {
	return l.readPod(ctx, ns, name, pod, objects.LogQuery{Tail: -1, Follow: true}, false, emit)
}

func (l *Logs) readKept(ctx context.Context, ns, name, id string, q objects.LogQuery, emit func(apiv1.LogLine) error) error {
	lines, err := fnlog.Load[apiv1.LogLine](ctx, l.Code, fnlog.StoppedKey(ns, name, id))
	if err != nil {
		return err
	}
	for _, line := range fnlog.Select(lines, q.Since, q.Tail) {
		if err := emit(line); err != nil {
			return err
		}
	}
	return nil
}

// errEmit carries emit's error out of a stream, apart from the stream's own.
type errEmit struct{ error }

func (e errEmit) Unwrap() error { return e.error }

// readPod reads pod's function container. Not started yet: nothing (followed: it waits for the
// start). Followed, it goes on across container restarts and a broken connection (resuming after
// the last line it sent) until the pod is done. A pod gone before the first read is read from
// what the controller kept of it when kept is set.
func (l *Logs) readPod(ctx context.Context, ns, name, pod string, q objects.LogQuery, kept bool, emit func(apiv1.LogLine) error) error {
	poll := cmp.Or(l.Poll, time.Second)
	var last time.Time // the newest line sent
	if q.Follow && q.Tail == 0 {
		last = time.Now() // a reconnect sends only what came after the start
	}
	streamed := int32(-1) // the restart count of the container read to its end
	first := true
	for {
		p, err := l.Pods.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && !ours(p, name):
			if first && kept {
				return l.readKept(ctx, ns, name, pod, q, emit) // it stopped between listing and reading
			}
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			// A follower outlasts a client-side failure (its rate limiter refusing a wait that
			// would pass the reader's deadline, a broken connection): it looks again, until the
			// reader goes. What the API server answered is returned.
			var status apierrors.APIStatus
			if q.Follow && !errors.As(err, &status) {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(poll):
					continue
				}
			}
			return err
		}
		cs := containerStatus(p)
		done := !p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		switch {
		case cs == nil || !started(cs):
			if !q.Follow || done {
				return nil // nothing printed yet; the API looks for it again
			}
		case cs.RestartCount == streamed && cs.State.Running == nil:
			if !q.Follow || done {
				return nil // this container was read to its end and no other follows
			}
		case first && q.Tail == 0 && !q.Follow:
			return nil
		default:
			opts := &corev1.PodLogOptions{Container: FunctionContainer, Timestamps: true, Follow: q.Follow}
			since := q.Since
			if last.After(since) {
				since = last
			}
			if !since.IsZero() {
				// Whole seconds only: the lines before since are skipped here.
				opts.SinceTime = &metav1.Time{Time: since.Truncate(time.Second)}
			}
			if first && q.Tail >= 0 {
				// The kubelet takes the last Tail lines, then those at or after since: the same
				// lines as the last Tail of those at or after since, since lines come in order.
				tail := int64(q.Tail)
				opts.TailLines = &tail
			}
			restarts, skipThrough := cs.RestartCount, last
			if first {
				// The kubelet's tail is exact: no skipping by this host's clock, which may not
				// be the node's.
				skipThrough = time.Time{}
			}
			err := l.stream(ctx, ns, pod, opts, func(line apiv1.LogLine) error {
				if line.Time.Before(q.Since) || !skipThrough.IsZero() && !line.Time.After(skipThrough) {
					return nil
				}
				last = line.Time
				return emit(line)
			})
			first = false
			var ee errEmit
			switch {
			case errors.As(err, &ee):
				return ee.error
			case ctx.Err() != nil:
				return nil
			case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
				return err // retrying would not help
			case apierrors.IsBadRequest(err) || apierrors.IsNotFound(err):
				// Not started after all (or gone): looked at again below.
				if !q.Follow {
					return nil
				}
			case !q.Follow:
				return err
			case err == nil:
				streamed = restarts // it ended: the container exited (or the stream was closed: resumed below)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// ours: pod is one of the function's serving pods (an instance ID names nothing else).
func ours(p *corev1.Pod, name string) bool {
	return p.Labels[runspec.LabelFunction] == name && p.Labels[runspec.LabelRole] == string(runspec.RoleFunction)
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == FunctionContainer {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// started: the container ran (a log exists), now or before a restart.
func started(cs *corev1.ContainerStatus) bool {
	return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
}

// stream reads one request's log lines; the body is closed on return (ctx's end aborts the read).
func (l *Logs) stream(ctx context.Context, ns, pod string, opts *corev1.PodLogOptions, emit func(apiv1.LogLine) error) error {
	rc, err := l.Pods.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	return ReadPodLog(rc, pod, emit)
}

// ReadPodLog parses a kubelet log read with timestamps ("<RFC 3339 time> <line>" per line) into
// lines of instance inst. A line longer than apiv1.MaxLogLine is cut (the rest is skipped, never
// held in memory). emit's error is returned wrapped so that the caller can tell it apart.
func ReadPodLog(r io.Reader, inst string, emit func(apiv1.LogLine) error) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf) <= apiv1.MaxLogLine+64 { // the timestamp, then at most the longest line kept
			buf = append(buf, frag...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(buf) > 0 {
			if eerr := emit(parsePodLine(buf, inst)); eerr != nil {
				return errEmit{eerr}
			}
			buf = buf[:0]
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func parsePodLine(b []byte, inst string) apiv1.LogLine {
	b = bytes.TrimRight(b, "\r\n")
	line := apiv1.LogLine{Instance: inst, Stream: apiv1.StreamOutput}
	ts, rest, ok := bytes.Cut(b, []byte(" "))
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if !ok && err == nil {
		rest = nil // a timestamp on an empty line
	}
	if err != nil {
		t, rest = time.Now(), b // not the kubelet's format: the whole line, now
	}
	line.Time, line.Line = t.UTC(), fnlog.Clip(string(rest))
	return line
}
