package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sless-dev/sless/lifecycle"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/build"
	"github.com/sless-dev/sless/codestore"
	"github.com/sless-dev/sless/fnlog"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
	"github.com/sless-dev/sless/runspec"
)

// Finalizer removes what lives outside the cluster (stored code, image tags) before a Function goes.
const Finalizer = "sless.dev/cleanup"

// FunctionReconciler builds a Function's code into an image in-process and runs it.
type FunctionReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// PolicyGate is the image whose `sless policy-wait` gates every pod of tenant code until its
	// NetworkPolicy is in force (resources.PolicyGate); "" for none.
	PolicyGate string
	// Pipeline builds and pushes images; Code is the store uploads land in.
	Pipeline *build.Pipeline
	Code     codestore.Store
	// PublicURL is the API's base URL, for status.url.
	PublicURL string
	// APIReader reads what the cache may not have caught up with yet (a deps Job's pod status when
	// the Job already failed); nil reads through Client.
	APIReader client.Reader
	// Deps installs dependencies on a cache miss; nil fails functions that declare any (retried,
	// so a reconfigured operator picks them up).
	Deps *DepsConfig
	// Recorder, when set, records build outcomes as Events on the Function, so
	// `kubectl describe function` shows why a build failed without reading operator logs.
	Recorder record.EventRecorder
	// Events records the rollout's steps (Starting, Ready, a start's Failed) for GET …/events,
	// after the build's own (the Pipeline records those); nil: the Pipeline's, which serialises
	// the writes of both to a function's event log.
	Events *fnlog.Events
	// MaxConcurrentReconciles is how many Functions are reconciled at once (default 4). A build
	// that finds no free slot in the Pipeline is requeued rather than waited for, so one tenant's
	// long builds hold at most its own slots, never every worker.
	MaxConcurrentReconciles int
	// Autoscale leaves the replicas of a running function to the Scaler (a new version still
	// gets at least one); otherwise a function runs one instance (none when its http triggers
	// are off).
	Autoscale bool
	// CleanupTimeout bounds the finalizer's attempts to delete a Function's images (default
	// DefaultCleanupTimeout); OperatorNamespace holds the record of the ones it gave up on.
	CleanupTimeout    time.Duration
	OperatorNamespace string
	// Now is the controller's clock (time.Now when nil): the times its status transitions carry.
	Now func() time.Time
}

func (r *FunctionReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *FunctionReconciler) event(fn *slessv1.Function, typ, reason, format string, args ...any) {
	emit(r.Recorder, fn, typ, reason, format, args...)
}

// lifecycle records a step of the function's lifecycle for GET …/events (apiv1.Reason*). A
// failure to record is logged: the rollout does not wait for the code store.
func (r *FunctionReconciler) lifecycle(ctx context.Context, fn *slessv1.Function, typ, reason, format string, args ...any) {
	events := r.Events
	if events == nil && r.Pipeline != nil {
		events = r.Pipeline.Events()
	}
	err := events.Record(ctx, fn.Namespace, fn.Name, apiv1.Event{Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...),
		CodeSHA256: cmp.Or(fn.Status.BuiltCodeSHA256, fn.Spec.CodeSHA256)})
	if err != nil {
		log.FromContext(ctx).Error(err, "recording a lifecycle event", "reason", reason)
	}
}

// emit records an Event when there is a recorder. Every reconciler's Events go through it: their
// messages carry what tenant code printed (an installer's output, a job's result).
func emit(rec record.EventRecorder, obj runtime.Object, typ, reason, format string, args ...any) {
	if rec != nil {
		rec.Event(obj, typ, reason, printable(fmt.Sprintf(format, args...)))
	}
}

// printable drops what a terminal would act on from text that may come from tenant code (an
// installer's output in an Event shown by kubectl): control characters other than newline and
// tab, and invalid UTF-8.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
}

// +kubebuilder:rbac:groups=sless.dev,resources=functions,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=functions/status;functions/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=triggers,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile moves a Function toward running its current code.
func (r *FunctionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var fn slessv1.Function
	if err := r.Get(ctx, req.NamespacedName, &fn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fn.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &fn)
	}
	if controllerutil.AddFinalizer(&fn, Finalizer) {
		if err := r.Update(ctx, &fn); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := fn.Status.DeepCopy()
	fn.Status.URL = runspec.FunctionURL(r.PublicURL, fn.Namespace, fn.Name)
	fn.Status.ObservedGeneration = fn.Generation
	if fn.Spec.CodeSHA256 == "" {
		fn.Apply(lifecycle.WaitingForCode{}, r.now())
		return ctrl.Result{}, r.writeStatus(ctx, &fn, before)
	}
	breq := buildRequest(&fn)
	key := r.Pipeline.Key(breq)
	if err := r.adoptLegacy(ctx, &fn, breq, key); err != nil {
		return ctrl.Result{}, err
	}
	if st := fn.Status.Lifecycle(); st.Image == "" || st.BuildKey != key {
		if !st.BuildDue(key) {
			return ctrl.Result{}, r.writeStatus(ctx, &fn, before) // this build failed already; a new upload or spec retries
		}
		if wait := st.RetryWait(key, r.now()); wait > 0 {
			// The platform failed this build a moment ago: whatever woke us (an owned object, a
			// trigger) does not bring the next attempt forward.
			return ctrl.Result{RequeueAfter: wait}, r.writeStatus(ctx, &fn, before)
		}
		res, err := r.build(ctx, &fn, before, breq, key)
		if err != nil || res.RequeueAfter > 0 {
			return res, err
		}
		logger.Info("built", "image", fn.Status.Image)
	}

	versions, missing, err := r.secrets(ctx, &fn)
	if err != nil {
		return ctrl.Result{}, err
	}
	if missing != "" {
		// Nothing to roll out until the secret is there (the namespace's change brings us back);
		// the version running, if any, keeps running.
		fn.Apply(lifecycle.StartFailed{Message: missing}, r.now())
		if before.Phase != apiv1.PhaseFailed || before.Message != missing {
			r.event(&fn, corev1.EventTypeWarning, "StartFailed", "%s", missing)
			r.lifecycle(ctx, &fn, apiv1.EventWarning, apiv1.ReasonFailed, "start failed: %s", missing)
		}
		return ctrl.Result{}, r.writeStatus(ctx, &fn, before)
	}
	replicas, disabledBy, err := r.replicas(ctx, &fn)
	if err != nil {
		return ctrl.Result{}, err
	}
	dep := resources.MakeDeployment(&fn, fn.Status.Image, replicas)
	if versions != "" {
		dep.Spec.Template.Annotations = map[string]string{resources.AnnotationSecretVersions: versions}
	}
	resources.PolicyGate(&dep.Spec.Template.Spec, r.PolicyGate)
	live := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: dep.Name, Namespace: dep.Namespace}}
	var prevImage string // what the Deployment ran before: another image is a new version starting
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, live, func() error {
		if c := live.Spec.Template.Spec.Containers; len(c) > 0 {
			prevImage = c[0].Image
		}
		changed := !equality.Semantic.DeepDerivative(dep.Spec.Template, live.Spec.Template)
		want := dep.Spec.Replicas
		if r.Autoscale && replicas > 0 && live.Spec.Replicas != nil {
			// The Scaler owns the count of a running function; a new image still starts one
			// instance that must pass its health check before the function is Ready. (Not
			// every template difference: defaults the API server adds make some templates
			// differ on every reconcile, which would undo every scale to zero.)
			n := *live.Spec.Replicas
			if c := live.Spec.Template.Spec.Containers; len(c) == 0 || c[0].Image != dep.Spec.Template.Spec.Containers[0].Image {
				n = max(n, 1)
			}
			want = &n
		}
		live.Labels, live.Spec.Replicas, live.Spec.Selector, live.Spec.Strategy = dep.Labels, want, dep.Spec.Selector, dep.Spec.Strategy
		live.Spec.ProgressDeadlineSeconds = dep.Spec.ProgressDeadlineSeconds
		// Only the fields we own: defaults the API server adds to the template stay untouched.
		if changed {
			live.Spec.Template = dep.Spec.Template
		}
		return controllerutil.SetControllerReference(&fn, live, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying deployment: %w", err)
	}
	if prevImage != fn.Status.Image && replicas > 0 {
		fn.Apply(lifecycle.Starting{Image: fn.Status.Image}, r.now())
		r.lifecycle(ctx, &fn, apiv1.EventNormal, apiv1.ReasonStarting, "starting %s", fn.Status.Image)
	}
	svc := resources.MakeService(&fn)
	liveSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, liveSvc, func() error {
		liveSvc.Labels, liveSvc.Spec.Selector, liveSvc.Spec.Ports = svc.Labels, svc.Spec.Selector, mergePorts(liveSvc.Spec.Ports, svc.Spec.Ports)
		return controllerutil.SetControllerReference(&fn, liveSvc, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying service: %w", err)
	}

	// What the Deployment reports (the status write follows its changes: Owns).
	off, target := replicas == 0, replicas
	if live.Spec.Replicas != nil && r.Autoscale && !off {
		target = *live.Spec.Replicas
	}
	limited := ""
	if quota, quotaMsg := quotaLimit(live); quota != "" && !off {
		limited = fmt.Sprintf("scale-up stopped at %d of %d replicas by the tenant quota %q: %s", live.Status.Replicas, target, quota, quotaMsg)
	}
	now := r.now()
	// ready is the Ready event's message when this version has just become Ready (once per
	// version: a later reconcile finds it Ready already).
	ready := ""
	switch {
	case off:
		fn.Apply(lifecycle.Disabled{Triggers: disabledBy}, now)
		if before.Image != fn.Status.Image {
			r.collectImages(ctx, &fn) // nothing runs the earlier versions
		}
		if before.Phase != apiv1.PhaseReady || before.Image != fn.Status.Image {
			ready = fmt.Sprintf("%s is ready; no instance runs: %s", fn.Status.Image, fn.Status.Message)
		}
	case rolledOut(live, target):
		fn.Apply(lifecycle.Ready{Image: fn.Status.Image, Replicas: int(live.Status.ReadyReplicas), Desired: int(target)}, now)
		if before.Phase != apiv1.PhaseReady || before.Image != fn.Status.Image {
			r.collectImages(ctx, &fn)
			ready = fmt.Sprintf("%s serves (%d ready of %d)", fn.Status.Image, live.Status.ReadyReplicas, target)
		}
	case limited != "":
		// Not a failure of the function, nor of its new version: it runs what the quota allows,
		// and gets the rest when pods of the namespace go (the Deployment's change brings us
		// back). Scaled below says so.
	case stalled(live) != "":
		// Not terminal: the Deployment keeps trying, and its recovery brings us back (Owns).
		fn.Apply(lifecycle.StartFailed{Message: fmt.Sprintf("the new version did not become ready within %d s: %s", resources.ProgressDeadline, stalled(live))}, now)
		if before.Phase != apiv1.PhaseFailed {
			r.event(&fn, corev1.EventTypeWarning, "StartFailed", "%s", fn.Status.Message)
			r.lifecycle(ctx, &fn, apiv1.EventWarning, apiv1.ReasonFailed, "start failed: %s", fn.Status.Message)
		}
	case fn.Status.Phase != apiv1.PhaseReady:
		// The rollout goes on; the Deployment's status change brings us back (Owns).
		fn.Apply(lifecycle.Starting{Image: fn.Status.Image}, now)
	}
	// Otherwise a running version scales; the Deployment's status change brings us back (Owns).
	if !off {
		fn.Apply(lifecycle.Scaled{Replicas: int(live.Status.ReadyReplicas), Desired: int(target), Limited: limited}, now)
	}
	if err := r.writeStatus(ctx, &fn, before); err != nil {
		return ctrl.Result{}, err
	}
	if ready != "" {
		// After the status write: a write that fails (a conflict) is retried, and records it then.
		r.lifecycle(ctx, &fn, apiv1.EventNormal, apiv1.ReasonReady, "%s", ready)
	}
	return ctrl.Result{}, nil
}

// secrets reads what the API recorded on fn's namespace of the secrets fn uses: their versions (a
// new one rolls the Deployment) and which is missing ("" when none). The controller reads no
// Secret.
func (r *FunctionReconciler) secrets(ctx context.Context, fn *slessv1.Function) (versions, missing string, err error) {
	if len(fn.Spec.SecretEnv) == 0 && len(fn.Spec.SecretFiles) == 0 {
		return "", "", nil
	}
	var ns corev1.Namespace
	if err := r.Get(ctx, client.ObjectKey{Name: fn.Namespace}, &ns); err != nil {
		return "", "", err
	}
	versions, missing = resources.SecretState(fn, &ns)
	return versions, missing, nil
}

// usersOfSecrets maps a tenant namespace to its functions that use a secret: a secret's change
// (an annotation of the namespace) restarts them.
func (r *FunctionReconciler) usersOfSecrets(ctx context.Context, obj client.Object) []reconcile.Request {
	var fns slessv1.FunctionList
	if err := r.List(ctx, &fns, client.InNamespace(obj.GetName())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, f := range fns.Items {
		if len(f.Spec.SecretEnv) > 0 || len(f.Spec.SecretFiles) > 0 {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: f.Namespace, Name: f.Name}})
		}
	}
	return out
}

// quotaLimit is the ResourceQuota that keeps the Deployment from creating pods and the ReplicaSet
// controller's message (the Deployment controller copies its ReplicaSets' ReplicaFailure
// condition), or "" when no quota does.
func quotaLimit(d *appsv1.Deployment) (quota, msg string) {
	for _, c := range d.Status.Conditions {
		if c.Type != appsv1.DeploymentReplicaFailure || c.Status != corev1.ConditionTrue || c.Reason != "FailedCreate" {
			continue
		}
		// `pods "x" is forbidden: exceeded quota: sless-quota, requested: pods=1, used: …`
		if _, rest, ok := strings.Cut(c.Message, "exceeded quota: "); ok {
			quota, _, _ = strings.Cut(rest, ",")
			return cmp.Or(strings.TrimSpace(quota), "?"), c.Message
		}
	}
	return "", ""
}

func buildRequest(fn *slessv1.Function) build.Request {
	return build.Request{Namespace: fn.Namespace, Function: fn.Name, Runtime: fn.Spec.Runtime, Entrypoint: fn.Spec.Entrypoint, CodeSHA256: fn.Spec.CodeSHA256}
}

// rolledOut is `kubectl rollout status` done: the Deployment controller saw the current template,
// every replica runs it and is available, and no replica of an older template is left. Without
// the last two, a rollout is "done" while the old pod still serves and the new one is not ready.
func rolledOut(d *appsv1.Deployment, replicas int32) bool {
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas >= replicas && s.Replicas <= s.UpdatedReplicas &&
		s.AvailableReplicas >= s.UpdatedReplicas
}

// stalled is the Deployment controller's message when a rollout passed its progress deadline.
func stalled(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return c.Message
		}
	}
	return ""
}

// writeStatus updates status only when it changed: an unchanged reconcile writes nothing.
func (r *FunctionReconciler) writeStatus(ctx context.Context, fn *slessv1.Function, before *slessv1.FunctionStatus) error {
	if equality.Semantic.DeepEqual(&fn.Status, before) {
		return nil
	}
	if err := r.Status().Update(ctx, fn); err != nil {
		return err
	}
	*before = *fn.Status.DeepCopy()
	return nil
}

// depsPoll is how often a build waiting on a deps Job looks again (the Job's status changes
// also wake it: the Job is owned).
const depsPoll = 10 * time.Second

// build runs the pipeline for the Function's current code, and moves its status through the
// lifecycle: a user error is Failed with the build's key latched and a terminal error (no hot
// loop); a platform error (a registry that refuses pushes, a code store that does not answer) is
// returned, so the work queue retries it with its backoff (lifecycle.RetryBase to RetryMax), and
// is Building until the retry budget is spent; a pending dependency layer or build slot requeues.
func (r *FunctionReconciler) build(ctx context.Context, fn *slessv1.Function, before *slessv1.FunctionStatus, breq build.Request, key string) (ctrl.Result, error) {
	fn.Apply(lifecycle.BuildStarted{Key: key, CodeSHA256: breq.CodeSHA256}, r.now())
	if err := r.writeStatus(ctx, fn, before); err != nil {
		return ctrl.Result{}, err
	}
	breq.Deps = r.deps(fn, key)
	res, err := r.Pipeline.Build(ctx, breq)
	if pe, ok := errors.AsType[*build.PendingError](err); ok {
		fn.Apply(lifecycle.BuildPending{Dependencies: pe.Dependencies, Reason: pe.Reason}, r.now())
		return ctrl.Result{RequeueAfter: pe.RetryAfter}, r.writeStatus(ctx, fn, before)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctrl.Result{}, ctx.Err()
		}
		user := build.IsUserError(err)
		fn.Apply(lifecycle.BuildFailed{Key: key, Message: build.Message(err), User: user}, r.now())
		if before.Phase != fn.Status.Phase || before.Message != fn.Status.Message {
			r.event(fn, corev1.EventTypeWarning, build.Reason(err), "%s", fn.Status.Message)
		}
		if werr := r.writeStatus(ctx, fn, before); werr != nil {
			return ctrl.Result{}, werr
		}
		if user {
			return ctrl.Result{}, reconcile.TerminalError(err)
		}
		return ctrl.Result{}, err
	}
	fn.Apply(lifecycle.BuildSucceeded{Key: res.Key, CodeSHA256: breq.CodeSHA256, Image: res.Image,
		Info: apiv1.BuildInfo{DurationMS: res.Duration.Milliseconds(), DepsKey: res.DepsKey, DepsCached: res.DepsCached, DepsWarning: res.DepsWarning}}, r.now())
	r.event(fn, corev1.EventTypeNormal, "Built", "built %s in %d ms", res.Image, res.Duration.Milliseconds())
	if err := r.writeStatus(ctx, fn, before); err != nil {
		return ctrl.Result{}, err
	}
	if res.DepsKey != "" {
		if err := r.deleteDepsJobs(ctx, fn, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// Annotations an operator before the shared build pipeline kept its build identity in.
const (
	legacyBuiltFor  = "sless.dev/built-for"
	legacyFailedFor = "sless.dev/failed-for"
)

// adoptLegacy carries a Function built by an earlier operator over without a rebuild: its build
// identity was an annotation (code, runtime digest and entrypoint, shortened), now it is
// status.build.key. The annotations go once their meaning is in the status.
func (r *FunctionReconciler) adoptLegacy(ctx context.Context, fn *slessv1.Function, breq build.Request, key string) error {
	built, failed := fn.Annotations[legacyBuiltFor], fn.Annotations[legacyFailedFor]
	if built == "" && failed == "" {
		return nil
	}
	runtimeImage, _ := r.Pipeline.RuntimeImage(breq.Runtime)
	_, digest, _ := strings.Cut(runtimeImage, "@sha256:")
	legacy := breq.CodeSHA256[:min(12, len(breq.CodeSHA256))] + "." + digest[:min(12, len(digest))] + "." + breq.Entrypoint
	if built == legacy && fn.Status.Image != "" && (fn.Status.Build == nil || fn.Status.Build.Key == "") {
		if fn.Status.Build == nil {
			fn.Status.Build = &slessv1.BuildStatus{}
		}
		fn.Status.Build.Key = key
	}
	if failed == legacy && fn.Status.Phase == apiv1.PhaseFailed {
		fn.Status.FailedBuildKey = key
	}
	status := fn.Status.DeepCopy()
	delete(fn.Annotations, legacyBuiltFor)
	delete(fn.Annotations, legacyFailedFor)
	if err := r.Update(ctx, fn); err != nil {
		return err
	}
	fn.Status = *status
	return nil
}

// replicas follows the rule the /fn/ proxy applies (runspec.DisabledBy), so the proxy's 503 and
// zero replicas always agree; disabledBy names the triggers that switch the function off.
func (r *FunctionReconciler) replicas(ctx context.Context, fn *slessv1.Function) (n int32, disabledBy []string, err error) {
	var ts slessv1.TriggerList
	if err := r.List(ctx, &ts, client.InNamespace(fn.Namespace)); err != nil {
		return 0, nil, err
	}
	triggers := make([]apiv1.Trigger, 0, len(ts.Items))
	for _, t := range ts.Items {
		triggers = append(triggers, apiv1.Trigger{Name: t.Name, Type: t.Spec.Type, FunctionRef: t.Spec.FunctionRef, Enabled: t.Spec.Enabled})
	}
	if off, names := runspec.DisabledBy(triggers, fn.Name); off {
		return 0, names, nil
	}
	return 1, nil, nil
}

// collectImages deletes the function's earlier images from the registry once its current one
// serves every replica (the rollout is done; running containers keep what they pulled). It runs
// inside the function's reconcile, so no build of it can push meanwhile. A failure is reported,
// not retried: the next version's rollout collects again.
func (r *FunctionReconciler) collectImages(ctx context.Context, fn *slessv1.Function) {
	keep := []string{fn.Status.Image}
	// A one-shot or cron run still to start (waiting for quota, or retried on a node without
	// the image) pulls the image it was created with; a CronJob not yet moved on creates more.
	var jobs batchv1.JobList
	var crons batchv1.CronJobList
	sel := client.MatchingLabels{runspec.LabelFunction: fn.Name}
	if err := r.List(ctx, &jobs, client.InNamespace(fn.Namespace), sel); err != nil {
		r.event(fn, corev1.EventTypeWarning, "CollectFailed", "listing the function's jobs: %v", err)
		return
	}
	if err := r.List(ctx, &crons, client.InNamespace(fn.Namespace), sel); err != nil {
		r.event(fn, corev1.EventTypeWarning, "CollectFailed", "listing the function's cron jobs: %v", err)
		return
	}
	for _, j := range jobs.Items {
		if !jobFinished(&j) {
			keep = append(keep, podImages(&j.Spec.Template.Spec)...)
		}
	}
	for _, c := range crons.Items {
		keep = append(keep, podImages(&c.Spec.JobTemplate.Spec.Template.Spec)...)
	}
	deleted, err := r.Pipeline.CollectImages(ctx, fn.Namespace, fn.Name, keep...)
	if len(deleted) > 0 {
		log.FromContext(ctx).Info("deleted earlier images", "images", deleted)
	}
	if err != nil {
		r.event(fn, corev1.EventTypeWarning, "CollectFailed", "deleting earlier images: %v", err)
	}
}

// podImages are the images by digest a pod spec runs (others are not function images).
func podImages(spec *corev1.PodSpec) []string {
	var out []string
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if strings.Contains(c.Image, "@sha256:") {
			out = append(out, c.Image)
		}
	}
	return out
}

func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// DefaultCleanupTimeout is how long a deleted Function's finalizer keeps trying to delete its
// images: one that cannot be deleted (the registry is gone, or refuses) must not keep the
// Function, and with it its namespace, forever.
const DefaultCleanupTimeout = 2 * time.Minute

// finalize removes the stored code and every image of the function (all its versions), then lets
// the Function go. Failures are retried every 15 s; CleanupTimeout after the delete it gives up on
// the images: a Warning Event names them, and ConfigMap OrphanedImagesConfigMap keeps them for
// the Collector to try again.
func (r *FunctionReconciler) finalize(ctx context.Context, fn *slessv1.Function) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(fn, Finalizer) {
		return ctrl.Result{}, nil
	}
	before := fn.Status.DeepCopy()
	fn.Apply(lifecycle.Deleting{}, r.now())
	if err := r.writeStatus(ctx, fn, before); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if err := r.Code.DeletePrefix(ctx, codestore.Prefix(fn.Namespace, fn.Name)); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting stored code: %w", err)
	}
	// Keeping nothing deletes every version the repository holds, the current one included.
	_, err := r.Pipeline.CollectImages(ctx, fn.Namespace, fn.Name)
	if err == nil && fn.Status.Image != "" {
		err = r.Pipeline.DeleteImages(ctx, fn.Status.Image) // pushed before versions were tagged
	}
	if err != nil {
		if timeout := cmp.Or(r.CleanupTimeout, DefaultCleanupTimeout); time.Since(fn.DeletionTimestamp.Time) < timeout {
			log.FromContext(ctx).Info("deleting images failed; retrying", "error", err)
			return ctrl.Result{RequeueAfter: min(15*time.Second, timeout/2)}, nil
		}
		if rerr := recordOrphan(ctx, r.Client, cmp.Or[client.Reader](r.APIReader, r.Client), r.OperatorNamespace, fn); rerr != nil {
			return ctrl.Result{}, rerr
		}
		r.event(fn, corev1.EventTypeWarning, "CleanupAbandoned", "gave up deleting the images of %s/%s (recorded in ConfigMap %s/%s for a later collection): %v",
			fn.Namespace, fn.Name, r.OperatorNamespace, OrphanedImagesConfigMap, err)
	}
	controllerutil.RemoveFinalizer(fn, Finalizer)
	if err := r.Update(ctx, fn); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

func mergePorts(live, want []corev1.ServicePort) []corev1.ServicePort {
	if len(live) == len(want) && len(live) > 0 && live[0].Port == want[0].Port && live[0].TargetPort == want[0].TargetPort {
		return live // keep server-assigned fields (protocol defaults)
	}
	return want
}

// rateLimiter is the work queue's backoff after an error: controller-runtime's (5 ms doubling,
// under an overall 10/s, burst 100 bucket), capped at lifecycle.RetryMax. Not lifecycle.RetryBase:
// a failed build's next attempt waits on its status (Retry.NotBefore, RetryWait) whatever wakes
// it, so the queue need not; starting at a second made every conflict — common at a cold start
// just after a scale to zero — cost the caller a second (CI: a cold start missed its 10 s).
func rateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, lifecycle.RetryMax),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)})
}

// SetupWithManager watches Functions, their Deployments and Services, Triggers (which decide
// replicas) and the tenant namespaces (which record the secrets' versions).
func (r *FunctionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes are not news: only a spec change (or a deletion, which moves the
		// generation too) wakes a Function, so a failed build waits out the work queue's backoff.
		For(&slessv1.Function{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, 4),
			RateLimiter: rateLimiter()}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&batchv1.Job{}). // deps Jobs
		Watches(&slessv1.Trigger{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			t := obj.(*slessv1.Trigger)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.FunctionRef}}}
		})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.usersOfSecrets), builder.WithPredicates(predicate.AnnotationChangedPredicate{})).
		Complete(r)
}
