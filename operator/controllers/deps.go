package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/deps"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// DepsConfig is how the Function reconciler gets a dependency layer it does not have cached: a
// Job in the function's namespace runs the installer in the runtime image, then `sless deps push`
// in the operator image layers the result and pushes it to the cache, and the build waits
// (requeued) until the layer is there.
type DepsConfig struct {
	// Store is the cache the builds read (<registry>/sless/deps).
	Store deps.Store
	// Repo is where the Jobs push, as pods reach it: <registry>/sless/deps.
	Repo string
	// OperatorImage holds the `sless` binary the Job's push step runs.
	OperatorImage string
	// Insecure lets the Job push over plain HTTP.
	Insecure bool
	// PushCredential is the docker config.json the Job's push container gets for key: with
	// sless's registry a credential that pushes that key's repository only and expires
	// (regauth.DepsPush). The installer, which runs the tenant's code, never sees it. Required.
	PushCredential func(key string) []byte
	// Proxy is the index proxy's URL for installers (HTTP_PROXY), e.g.
	// http://sless-index-proxy.sless-system.svc:3128; "" for none.
	Proxy string
	// Pins records each key's layer the first time it is read from the store (deps.Pinned); a
	// ConfigMapPins in the operator's namespace. Required.
	Pins deps.Pins
}

// jobDeps makes a Function's dependency layer with a Job on a cache miss (build.Deps): the build
// is pending until the Job has pushed the layer. build is the key of the build asking.
type jobDeps struct {
	r     *FunctionReconciler
	fn    *slessv1.Function
	build string
}

// noDeps is the dependency source of an operator started without --operator-image: the
// platform's configuration, not the function, is at fault (retried with backoff, so a
// reconfigured operator picks it up).
type noDeps struct{}

func (noDeps) Layer(context.Context, deps.Spec, string) (deps.Result, error) {
	return deps.Result{}, fmt.Errorf("%w (sless-operator --operator-image)", build.ErrNoDeps)
}

// deps is how the build of fn with key gets its dependency layer.
func (r *FunctionReconciler) deps(fn *slessv1.Function, key string) build.Deps {
	if r.Deps == nil {
		return noDeps{}
	}
	return &jobDeps{r: r, fn: fn, build: key}
}

// annotationBuildKey on a deps Job names the build (build.Key) that started it.
const annotationBuildKey = "sless.dev/build-key"

// depsJobName is unique per function and key, so a changed lockfile never waits on an old Job.
func depsJobName(fn, key string) string {
	return fn[:min(len(fn), 63-len("-deps-")-12)] + "-deps-" + key[:12]
}

// Layer returns the cached layer when there is one, and otherwise makes sure a deps Job runs and
// reports the build as pending.
func (d *jobDeps) Layer(ctx context.Context, spec deps.Spec, dir string) (deps.Result, error) {
	r, fn := d.r, d.fn
	in, err := spec.Installer()
	if err != nil {
		return deps.Result{}, err
	}
	key, err := deps.Key(spec)
	if err != nil {
		return deps.Result{}, err
	}
	var job batchv1.Job
	jobKey := client.ObjectKey{Namespace: fn.Namespace, Name: depsJobName(fn.Name, key)}
	jobFound := false
	switch err := r.Get(ctx, jobKey, &job); {
	case err == nil:
		jobFound = true
	case !apierrors.IsNotFound(err):
		return deps.Result{}, err
	}
	l, err := r.Deps.Store.Get(ctx, key)
	if err == nil {
		if l, err = deps.Pinned(ctx, r.Deps.Pins, key, l, dir); err != nil {
			return deps.Result{}, err
		}
		return deps.Result{Layer: l, Key: key, Cached: !jobFound, Warning: in.Warning}, nil
	}
	if !errors.Is(err, deps.ErrNotFound) {
		return deps.Result{}, fmt.Errorf("reading the deps cache: %w", err)
	}
	if jobFound {
		return d.finishedJob(ctx, &job, key)
	}
	// Jobs of earlier keys of this function (requirements changed) are of no use any more.
	if err := r.deleteDepsJobs(ctx, fn, jobKey.Name); err != nil {
		return deps.Result{}, err
	}
	files := map[string]string{}
	for n, b := range spec.Files {
		files[n] = string(b)
	}
	// A fresh Secret name per Job: a replaced Job's Secret may still await garbage collection.
	secretName := jobKey.Name + "-push-" + rand.String(5)
	j, cm := resources.MakeDepsJob(resources.DepsJob{Namespace: fn.Namespace, Name: jobKey.Name, Function: fn.Name,
		RuntimeImage: spec.RuntimeImage, Argv: in.Argv, Env: in.Env, Manifests: files, OperatorImage: r.Deps.OperatorImage,
		PushTo: deps.LayerRef(r.Deps.Repo, key), DepsDir: dir, Insecure: r.Deps.Insecure, PushSecret: secretName, Proxy: r.Deps.Proxy})
	j.Annotations = map[string]string{annotationBuildKey: d.build}
	resources.PolicyGate(&j.Spec.Template.Spec, r.PolicyGate)
	for _, obj := range []client.Object{cm, j} {
		if err := controllerutil.SetControllerReference(fn, obj, r.Scheme); err != nil {
			return deps.Result{}, err
		}
		if err := r.Create(ctx, obj); apierrors.IsAlreadyExists(err) && obj == client.Object(j) {
			return deps.Result{}, depsPending(j.Name) // another reconcile made it, and its Secret
		} else if err != nil && !apierrors.IsAlreadyExists(err) {
			return deps.Result{}, fmt.Errorf("creating deps %T: %w", obj, err)
		}
	}
	// After the Job, to be owned by it (its pod waits for the volume meanwhile). Were the operator
	// to stop in between, the pod waits until the Job's deadline, which fails it and retries.
	if err := r.Create(ctx, resources.DepsPushSecret(j, secretName, r.Deps.PushCredential(key))); err != nil {
		return deps.Result{}, fmt.Errorf("creating the deps push credential: %w", err)
	}
	r.event(fn, corev1.EventTypeNormal, "InstallingDependencies", "dependency cache miss (key %s): Job %s installs them", key[:12], j.Name)
	return deps.Result{}, depsPending(j.Name)
}

// finishedJob decides what a Job found for this key means while its layer is not in the cache:
// still running (pending), failed for an earlier build (replaced), failed in the install (the
// dependencies' fault), or failed otherwise (the platform's: removed and retried with backoff).
func (d *jobDeps) finishedJob(ctx context.Context, job *batchv1.Job, key string) (deps.Result, error) {
	r, fn := d.r, d.fn
	done, ok := finished(job)
	if !done {
		return deps.Result{}, depsPending(job.Name)
	}
	if job.Annotations[annotationBuildKey] != d.build {
		// A Job that failed for an earlier build of this function: this build retries it.
		if err := r.deleteDepsJob(ctx, fn.Namespace, job.Name); err != nil {
			return deps.Result{}, err
		}
		return deps.Result{}, depsPending(job.Name) // its deletion brings us back to start the new one
	}
	installFailed, msg, err := depsJobOutcome(ctx, uncached(r.APIReader, r.Client), job)
	if err != nil {
		return deps.Result{}, err
	}
	if !installFailed {
		// The platform failed, not the dependencies (a push refused, the deadline, an eviction,
		// an image pull): the Job goes and the build is retried with backoff.
		if err := r.deleteDepsJob(ctx, fn.Namespace, job.Name); err != nil {
			return deps.Result{}, err
		}
		if ok {
			msg = fmt.Sprintf("completed but %s is not in the registry; %s", deps.LayerRef(r.Deps.Repo, key), msg)
		}
		return deps.Result{}, fmt.Errorf("deps Job %s failed (%s); retrying", job.Name, strings.TrimSpace(msg))
	}
	// The installer itself failed: the user's dependencies need fixing. The Job stays (its pod's
	// logs say why) until a new build replaces it or the Function goes; a stale read of the
	// Function sees it and reports the same failure instead of starting another install.
	return deps.Result{}, &deps.InstallError{Output: strings.TrimSpace(msg)}
}

func depsPending(job string) error {
	return &build.PendingError{Reason: "installing dependencies: Job " + job, RetryAfter: depsPoll, Dependencies: true}
}

// deleteDepsJobs removes the function's deps Jobs other than keep ("" for all).
func (r *FunctionReconciler) deleteDepsJobs(ctx context.Context, fn *slessv1.Function, keep string) error {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(fn.Namespace), client.MatchingLabels(runspec.Labels(fn.Name, runspec.RoleDeps))); err != nil {
		return err
	}
	for _, j := range jobs.Items {
		if j.Name != keep && metav1.IsControlledBy(&j, fn) {
			if err := r.deleteDepsJob(ctx, fn.Namespace, j.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteDepsJob removes a finished deps Job and its manifests (pods go with the Job, in the
// background).
func (r *FunctionReconciler) deleteDepsJob(ctx context.Context, ns, name string) error {
	bg := client.PropagationPolicy("Background")
	if err := r.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, bg); client.IgnoreNotFound(err) != nil {
		return err
	}
	return client.IgnoreNotFound(r.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
}

func jobConditionMessage(job *batchv1.Job) string {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// uncached is the API reader when there is one.
func uncached(api client.Reader, c client.Client) client.Reader {
	if api != nil {
		return api
	}
	return c
}

// depsJobOutcome says whether a finished deps Job failed in its install step (a non-zero exit of
// the installer: the dependencies are at fault) and what its pod said.
func depsJobOutcome(ctx context.Context, c client.Reader, job *batchv1.Job) (installFailed bool, msg string, err error) {
	pods, err := jobPods(ctx, c, job)
	if err != nil {
		return false, "", err
	}
	for _, p := range pods {
		for _, cs := range p.Status.InitContainerStatuses {
			if t := cs.State.Terminated; cs.Name == "install" && t != nil && t.ExitCode != 0 {
				return true, strings.TrimSpace(t.Message), nil
			}
		}
	}
	if msg = terminationMessage(pods); msg == "" {
		msg = jobConditionMessage(job)
	}
	return false, msg, nil
}

// jobPods are the pods of this Job: by its name, and by its UID where the pod carries it (a Job
// replaced under the same name may leave pods behind for a moment).
func jobPods(ctx context.Context, c client.Reader, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"job-name": job.Name}); err != nil {
		return nil, err
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if uid, ok := p.Labels[batchv1.ControllerUidLabel]; ok && uid != string(job.UID) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// podTerminationMessage is what a Job's pod said as it ended (terminationMessage of its pods).
func podTerminationMessage(ctx context.Context, c client.Reader, job *batchv1.Job) (string, error) {
	pods, err := jobPods(ctx, c, job)
	return terminationMessage(pods), err
}

// terminationMessage is the termination message (or, without one, the reason) of the first
// container that failed, init containers first; else of the last that terminated. Job mode writes
// its result there; a deps install its last log lines. It is clipped to runspec.MaxResultBytes
// (runspec.ClipMessage), as the kubelet clips each container's, whoever wrote the pod's status.
func terminationMessage(pods []corev1.Pod) string {
	return runspec.ClipMessage(lastTermination(pods))
}

func lastTermination(pods []corev1.Pod) string {
	last := ""
	for _, p := range pods {
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			t := cs.State.Terminated
			if t == nil {
				continue
			}
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = t.Reason
			}
			if t.ExitCode != 0 {
				return msg
			}
			last = msg
		}
	}
	return last
}
