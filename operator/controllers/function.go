// Package controllers holds the operator's reconcilers (controller-runtime): Function builds
// in-process and runs a Deployment and Service (scaled to 0 when its http triggers disable it);
// FunctionJob runs Jobs; Trigger runs cron triggers as CronJobs.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/deps"
	"github.com/sless-dev/sless/layers"
	"github.com/sless-dev/sless/oci"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/operator/resources"
)

// Finalizer removes what lives outside the cluster (stored code, image tags) before a Function goes.
const Finalizer = "sless.dev/cleanup"

// FunctionReconciler builds a Function's code into an image in-process and runs it.
type FunctionReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// Builder is the long-lived image builder; Code the store uploads land in.
	Builder *oci.Builder
	Code    api.CodeStore
	// Runtimes maps a runtime name to its image by digest.
	Runtimes map[string]string
	// Registry is where function images are pushed (host[:port]).
	Registry string
	// PublicURL is the API's base URL, for status.url.
	PublicURL string
	// Builds bounds concurrent builds; BuildTimeout bounds one.
	Builds       chan struct{}
	BuildTimeout time.Duration
	// APIReader reads what the cache may not have caught up with yet (a deps Job's pod status when
	// the Job already failed); nil reads through Client.
	APIReader client.Reader
	// Deps installs dependencies on a cache miss; nil refuses functions that declare any.
	Deps *DepsConfig
	// Recorder, when set, records build outcomes as Events on the Function, so
	// `kubectl describe function` shows why a build failed without reading operator logs.
	Recorder record.EventRecorder
}

func (r *FunctionReconciler) event(fn *slessv1.Function, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(fn, typ, reason, format, args...)
	}
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
		return ctrl.Result{}, r.finalize(ctx, &fn)
	}
	if controllerutil.AddFinalizer(&fn, Finalizer) {
		if err := r.Update(ctx, &fn); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := fn.Status.DeepCopy()
	fn.Status.URL = strings.TrimRight(r.PublicURL, "/") + "/fn/" + fn.Namespace + "/" + fn.Name
	fn.Status.ObservedGeneration = fn.Generation
	if fn.Spec.CodeSHA256 == "" {
		fn.MarkPending("waiting for code: upload a zip")
		return ctrl.Result{}, r.writeStatus(ctx, &fn, before)
	}
	if fn.Status.Image == "" || fn.Status.BuiltCodeSHA256 != fn.Spec.CodeSHA256 || fn.Annotations[annotationBuiltFor] != buildKey(&fn, r.Runtimes) {
		if fn.Status.Phase == slessv1.PhaseFailed && fn.Annotations[annotationFailedFor] == buildKey(&fn, r.Runtimes) {
			return ctrl.Result{}, nil // this build failed already; a new upload or spec retries
		}
		image, wait, err := r.build(ctx, &fn, before)
		if err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
		logger.Info("built", "image", image)
	}

	replicas, err := r.replicas(ctx, &fn)
	if err != nil {
		return ctrl.Result{}, err
	}
	dep := resources.MakeDeployment(&fn, fn.Status.Image, replicas)
	live := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: dep.Name, Namespace: dep.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, live, func() error {
		live.Labels, live.Spec.Replicas, live.Spec.Selector, live.Spec.Strategy = dep.Labels, dep.Spec.Replicas, dep.Spec.Selector, dep.Spec.Strategy
		live.Spec.ProgressDeadlineSeconds = dep.Spec.ProgressDeadlineSeconds
		// Only the fields we own: defaults the API server adds to the template stay untouched.
		if !equality.Semantic.DeepDerivative(dep.Spec.Template, live.Spec.Template) {
			live.Spec.Template = dep.Spec.Template
		}
		return controllerutil.SetControllerReference(&fn, live, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying deployment: %w", err)
	}
	svc := resources.MakeService(&fn)
	liveSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, liveSvc, func() error {
		liveSvc.Labels, liveSvc.Spec.Selector, liveSvc.Spec.Ports = svc.Labels, svc.Spec.Selector, mergePorts(liveSvc.Spec.Ports, svc.Spec.Ports)
		return controllerutil.SetControllerReference(&fn, liveSvc, r.Scheme)
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying service: %w", err)
	}

	switch {
	case replicas == 0:
		fn.MarkReady()
		fn.Status.Message = "stopped: disabled by its http triggers"
	case rolledOut(live, replicas):
		fn.MarkReady()
	case stalled(live) != "":
		// Not terminal: the Deployment keeps trying, and its recovery brings us back (Owns).
		fn.MarkFailed("StartFailed", fmt.Sprintf("the new version did not become ready within %d s: %s", resources.ProgressDeadline, stalled(live)))
		if before.Phase != slessv1.PhaseFailed {
			r.event(&fn, corev1.EventTypeWarning, "StartFailed", "%s", fn.Status.Message)
		}
	default:
		if err := r.writeStatus(ctx, &fn, before); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil // the Deployment's status change brings us back (Owns)
	}
	return ctrl.Result{}, r.writeStatus(ctx, &fn, before)
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

const (
	annotationBuiltFor  = "sless.dev/built-for"
	annotationFailedFor = "sless.dev/failed-for"
)

// buildKey names what decides the image: code, runtime image and entrypoint.
func buildKey(fn *slessv1.Function, runtimes map[string]string) string {
	return fn.Spec.CodeSHA256[:min(12, len(fn.Spec.CodeSHA256))] + "." + digestOf(runtimes[fn.Spec.Runtime]) + "." + fn.Spec.Entrypoint
}

func digestOf(ref string) string {
	_, d, _ := strings.Cut(ref, "@sha256:")
	return d[:min(12, len(d))]
}

// writeStatus updates status only when it changed: an unchanged reconcile writes nothing.
func (r *FunctionReconciler) writeStatus(ctx context.Context, fn *slessv1.Function, before *slessv1.FunctionStatus) error {
	if equality.Semantic.DeepEqual(&fn.Status, before) {
		return nil
	}
	return r.Status().Update(ctx, fn)
}

// depsPoll is how often a build waiting on a deps Job looks again (the Job's status changes
// also wake it: the Job is owned).
const depsPoll = 10 * time.Second

// build makes and pushes the image, or reports how long to wait for its deps Job. User errors
// become Failed and a terminal error (no hot loop).
func (r *FunctionReconciler) build(ctx context.Context, fn *slessv1.Function, before *slessv1.FunctionStatus) (string, time.Duration, error) {
	select {
	case r.Builds <- struct{}{}:
		defer func() { <-r.Builds }()
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
	bctx, cancel := context.WithTimeout(ctx, r.BuildTimeout)
	defer cancel()
	key := buildKey(fn, r.Runtimes)
	fail := func(err error) (string, time.Duration, error) {
		var ie *deps.InstallError
		reason, what := "BuildFailed", "build failed: "
		if errors.As(err, &ie) || errors.Is(err, deps.ErrInvalidSpec) {
			reason, what = "DependenciesFailed", ""
		}
		user := reason == "DependenciesFailed" || errors.Is(err, oci.ErrInvalidSource) || errors.Is(err, api.ErrNotFound) || isLayerError(err)
		fn.MarkFailed(reason, what+err.Error())
		r.event(fn, corev1.EventTypeWarning, reason, "%s%v", what, err)
		if werr := r.writeStatus(ctx, fn, before); werr != nil {
			return "", 0, werr
		}
		if !user {
			return "", 0, err
		}
		if fn.Annotations == nil {
			fn.Annotations = map[string]string{}
		}
		fn.Annotations[annotationFailedFor] = key
		if uerr := r.Update(ctx, fn); uerr != nil {
			return "", 0, uerr
		}
		return "", 0, reconcile.TerminalError(err)
	}

	code, size, err := r.fetchCode(bctx, fn)
	if err != nil {
		return fail(err)
	}
	defer func() { code.Close(); os.Remove(code.Name()) }()
	d, err := r.dependencies(bctx, fn, code, size)
	if err != nil {
		return fail(err)
	}
	if d != nil && d.layer == nil {
		fn.MarkInstallingDependencies(d.job)
		return "", depsPoll, r.writeStatus(ctx, fn, before)
	}

	fn.MarkBuilding()
	if err := r.writeStatus(ctx, fn, before); err != nil {
		return "", 0, err
	}
	*before = *fn.Status.DeepCopy()
	start := time.Now()
	image, err := r.buildImage(bctx, fn, code, size, d)
	if err != nil {
		return fail(err)
	}
	now := metav1.Now()
	fn.MarkBuilt(image)
	fn.Status.LastBuiltAt = &now
	fn.Status.Build = &slessv1.BuildStatus{DurationMS: time.Since(start).Milliseconds()}
	if d != nil {
		fn.Status.Build.DepsKey, fn.Status.Build.DepsCached = d.key, d.cached
	}
	r.event(fn, corev1.EventTypeNormal, "Built", "built %s in %d ms", image, fn.Status.Build.DurationMS)
	if err := r.Status().Update(ctx, fn); err != nil {
		return "", 0, err
	}
	*before = *fn.Status.DeepCopy()
	if d != nil {
		if err := r.deleteDepsJobs(ctx, fn, ""); err != nil {
			return "", 0, err
		}
	}
	if fn.Annotations == nil {
		fn.Annotations = map[string]string{}
	}
	fn.Annotations[annotationBuiltFor] = key
	delete(fn.Annotations, annotationFailedFor)
	if err := r.Update(ctx, fn); err != nil {
		return "", 0, err
	}
	return image, 0, nil
}

func isLayerError(err error) bool {
	var ee *layers.EntryError
	return errors.As(err, &ee) || errors.Is(err, layers.ErrInvalidArchive) || errors.Is(err, layers.ErrTooLarge) || errors.Is(err, layers.ErrCompressionRatio)
}

// fetchCode copies the uploaded zip into a temp file (the builder and the manifest reader need
// random access); the caller removes it.
func (r *FunctionReconciler) fetchCode(ctx context.Context, fn *slessv1.Function) (*os.File, int64, error) {
	rc, err := r.Code.Get(ctx, api.CodeKey(fn.Namespace, fn.Name, fn.Spec.CodeSHA256))
	if err != nil {
		return nil, 0, fmt.Errorf("reading the uploaded code: %w", err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp("", "sless-code-*.zip")
	if err != nil {
		return nil, 0, err
	}
	size, err := io.Copy(tmp, rc)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, 0, err
	}
	return tmp, size, nil
}

func (r *FunctionReconciler) buildImage(ctx context.Context, fn *slessv1.Function, code *os.File, size int64, d *depsOutcome) (string, error) {
	runtimeRef, ok := r.Runtimes[fn.Spec.Runtime]
	if !ok {
		return "", fmt.Errorf("%w: runtime %q is not installed", oci.ErrInvalidSource, fn.Spec.Runtime)
	}
	src := oci.Source{RuntimeImage: runtimeRef, Zip: code, ZipSize: size, ZipSHA256: fn.Spec.CodeSHA256,
		Handler: fn.Spec.Entrypoint, Function: fn.Name, Namespace: fn.Namespace, Runtime: fn.Spec.Runtime}
	if d != nil {
		src.Deps, src.DepsKey = d.layer, d.key
	}
	res, err := r.Builder.Build(ctx, src)
	if err != nil {
		return "", err
	}
	defer res.Close()
	ref, err := r.Builder.Push(ctx, res, r.Registry+"/"+fn.Namespace+"/"+fn.Name+":latest")
	if err != nil {
		return "", err
	}
	return ref.String(), nil
}

// replicas follows DESIGN.md §5 through the rule the /fn/ proxy applies (api.DisabledBy), so the
// proxy's 503 and zero replicas always agree.
func (r *FunctionReconciler) replicas(ctx context.Context, fn *slessv1.Function) (int32, error) {
	var ts slessv1.TriggerList
	if err := r.List(ctx, &ts, client.InNamespace(fn.Namespace)); err != nil {
		return 0, err
	}
	triggers := make([]apiv1.Trigger, 0, len(ts.Items))
	for _, t := range ts.Items {
		triggers = append(triggers, apiv1.Trigger{Name: t.Name, Type: t.Spec.Type, FunctionRef: t.Spec.FunctionRef, Enabled: t.Spec.Enabled})
	}
	if off, _ := api.DisabledBy(triggers, fn.Name); off {
		return 0, nil
	}
	return 1, nil
}

// finalize removes the stored code and the image tag, then lets the Function go.
func (r *FunctionReconciler) finalize(ctx context.Context, fn *slessv1.Function) error {
	if !controllerutil.ContainsFinalizer(fn, Finalizer) {
		return nil
	}
	if err := r.Code.DeletePrefix(ctx, api.CodePrefix(fn.Namespace, fn.Name)); err != nil {
		return fmt.Errorf("deleting stored code: %w", err)
	}
	if fn.Status.Image != "" {
		if ref, err := name.NewDigest(fn.Status.Image); err == nil {
			if err := remote.Delete(ref, remote.WithContext(ctx)); err != nil && !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
				return fmt.Errorf("deleting image %s: %w", fn.Status.Image, err)
			}
		}
	}
	controllerutil.RemoveFinalizer(fn, Finalizer)
	if err := r.Update(ctx, fn); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func mergePorts(live, want []corev1.ServicePort) []corev1.ServicePort {
	if len(live) == len(want) && len(live) > 0 && live[0].Port == want[0].Port && live[0].TargetPort == want[0].TargetPort {
		return live // keep server-assigned fields (protocol defaults)
	}
	return want
}

// SetupWithManager watches Functions, their Deployments and Services, and Triggers (which decide
// replicas).
func (r *FunctionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&slessv1.Function{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&batchv1.Job{}). // deps Jobs
		Watches(&slessv1.Trigger{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			t := obj.(*slessv1.Trigger)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.FunctionRef}}}
		})).
		Complete(r)
}
