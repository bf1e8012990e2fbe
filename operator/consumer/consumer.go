package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
	slessv1 "github.com/sless-dev/sless/operator/api/v1alpha1"
	"github.com/sless-dev/sless/rabbitmq"
)

// StatusEvery bounds how often a trigger's status is written: every change at most this often (a
// busy queue changes it with every message).
const StatusEvery = 500 * time.Millisecond

// Runner is the namespace's consumers: a reconciler of its Triggers.
type Runner struct {
	// Client reads the namespace's Triggers (a cache of that namespace) and patches their status.
	Client client.Client
	// Namespace is the tenant's.
	Namespace string
	// APIURL is the API's internal Service (http://sless-api.<operator namespace>.svc): /fn/.
	APIURL string
	// TokenFile holds the namespace's event token, read at every request (the Secret may be
	// rotated under the pod).
	TokenFile string
	// SecretsDir holds the trigger's secrets as <secret>/<key>.
	SecretsDir string
	// HTTP sends to /fn/; nil: a client without a timeout (a function may run 15 minutes; a
	// lost connection ends the attempt).
	HTTP *http.Client
	// Reconnect bounds the broker reconnect backoff (rabbitmq's defaults when zero).
	ReconnectMin, ReconnectMax time.Duration
	// Log hears of starts and stops; nil is silent.
	Log *slog.Logger
	// reports carry every decision to the API (report.go).
	reports reporter

	mu  sync.Mutex
	run map[string]*consuming
	// totals are the last totals of this pod's stopped consumers, by trigger.
	totals map[string][2]int64
	wg     sync.WaitGroup
	stop   chan struct{} // closed by Stop
}

type consuming struct {
	key    string
	cancel context.CancelFunc
	done   sync.WaitGroup
	c      *rabbitmq.Consumer
	base   [2]int64 // the delivered and dead-lettered totals it started from
}

// SetupWithManager reconciles every Trigger the manager's cache holds (the namespace's) and stops
// the consumers when the manager stops.
func (r *Runner) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Namespace == "" || r.APIURL == "" || r.TokenFile == "" || r.SecretsDir == "" {
		return errors.New("consumer: Runner needs Client, Namespace, APIURL, TokenFile and SecretsDir")
	}
	r.run = map[string]*consuming{}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.HTTP == nil {
		r.HTTP = &http.Client{}
	}
	r.HTTP = &http.Client{Transport: &tokenTransport{file: r.TokenFile, next: r.HTTP.Transport}, Timeout: r.HTTP.Timeout}
	// The consumers stop with the manager; the last report follows, with their last decisions.
	if err := mgr.Add(runnable(func(ctx context.Context) error {
		r.reportLoop(ctx)
		r.stopAll()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		r.flushReports(fctx)
		return nil
	})); err != nil {
		return err
	}
	// Spec changes (and creations, deletions) only: the consumers' own status patches, twice a
	// second on a busy queue, change nothing to reconcile.
	return ctrl.NewControllerManagedBy(mgr).For(&slessv1.Trigger{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).Complete(r)
}

type runnable func(context.Context) error

func (f runnable) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection: one consumer pod per namespace (its Deployment's one replica) elects none.
func (f runnable) NeedLeaderElection() bool { return false }

// Reconcile starts, restarts or stops one trigger's consumer.
func (r *Runner) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace != r.Namespace {
		return ctrl.Result{}, nil
	}
	var tr slessv1.Trigger
	if err := r.Client.Get(ctx, req.NamespacedName, &tr); err != nil {
		if apierrors.IsNotFound(err) {
			r.stopOne(req.Name)
			r.mu.Lock()
			delete(r.totals, req.Name) // a trigger created again under the name starts at 0
			r.mu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if tr.Spec.Type != apiv1.TriggerRabbitMQ || tr.Spec.RabbitMQ == nil {
		return ctrl.Result{}, nil
	}
	if (tr.Spec.Enabled != nil && !*tr.Spec.Enabled) || !tr.DeletionTimestamp.IsZero() {
		// Disabled: it stops consuming and its messages stay queued; what it had in flight is not
		// acknowledged, so the broker delivers it again later.
		if r.stopOne(tr.Name) {
			r.Log.Info("rabbitmq trigger stopped", "trigger", tr.Name)
		}
		return ctrl.Result{}, r.patch(ctx, tr.Name, map[string]any{"connected": false, "inFlight": 0, "lastError": ""})
	}
	spec, _ := json.Marshal(tr.Spec)
	sum := sha256.Sum256(fmt.Appendf(spec, "\x00%d", tr.Generation))
	key := hex.EncodeToString(sum[:])
	r.mu.Lock()
	cur := r.run[tr.Name]
	r.mu.Unlock()
	if cur != nil && cur.key == key {
		return ctrl.Result{}, nil
	}
	r.stopOne(tr.Name)
	mq := tr.Spec.RabbitMQ
	secret, skey, err := apiv1.SplitSecretRef(mq.URLSecret)
	if err != nil {
		return ctrl.Result{}, r.patch(ctx, tr.Name, map[string]any{"connected": false, "lastError": err.Error()})
	}
	maxRetries := apiv1.DefaultMaxRetries
	if mq.MaxRetries != nil {
		maxRetries = *mq.MaxRetries
	}
	c, err := rabbitmq.New(rabbitmq.Config{
		URLFunc: r.urlOf(secret, skey), Queue: mq.Queue, Passive: mq.Passive, DeadLetter: mq.DeadLetter, Prefetch: mq.Prefetch,
		Policy: delivery.Policy{MaxRetries: maxRetries, Backoff: time.Duration(mq.RetryBackoffMS) * time.Millisecond},
		Name:   "sless trigger " + r.Namespace + "/" + tr.Name, ReconnectMin: r.ReconnectMin, ReconnectMax: r.ReconnectMax,
	}, rabbitmq.FunctionInvoker{Namespace: r.Namespace, Function: tr.Spec.FunctionRef, Trigger: tr.Name, Client: r.HTTP, BaseURL: r.APIURL},
		func(res rabbitmq.Result) { r.reports.observe(tr.Name, mq.DeadLetter, res) })
	if err != nil {
		return ctrl.Result{}, r.patch(ctx, tr.Name, map[string]any{"connected": false, "lastError": err.Error()})
	}
	// The counts go on from what the trigger's status says: a restarted consumer (a new pod) keeps
	// them monotonic.
	base := [2]int64{tr.Status.DeliveredTotal, tr.Status.DeadLetteredTotal}
	r.mu.Lock()
	// A consumer of this pod stopped a moment ago: its last totals, which the cached trigger read
	// above may not show yet.
	if prev, ok := r.totals[tr.Name]; ok {
		base = [2]int64{max(base[0], prev[0]), max(base[1], prev[1])}
	}
	r.mu.Unlock()
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run := &consuming{key: key, cancel: cancel, c: c, base: base}
	r.mu.Lock()
	if r.stop == nil {
		r.stop = make(chan struct{})
	}
	select {
	case <-r.stop:
		r.mu.Unlock()
		cancel()
		return ctrl.Result{}, nil // stopping
	default:
	}
	r.run[tr.Name] = run
	r.wg.Add(2)
	run.done.Add(2)
	r.mu.Unlock()
	go func() { defer r.wg.Done(); defer run.done.Done(); c.Run(cctx) }()
	go func() { defer r.wg.Done(); defer run.done.Done(); r.writeStatus(cctx, tr.Name, c, base) }()
	r.Log.Info("rabbitmq trigger consuming", "trigger", tr.Name, "queue", mq.Queue, "function", tr.Spec.FunctionRef)
	return ctrl.Result{}, nil
}

// urlOf reads the broker URL from the secret file (trimmed of surrounding space) at every
// connection.
func (r *Runner) urlOf(secret, key string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(filepath.Join(r.SecretsDir, secret, key))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("secret %q does not exist or has no key %q (rabbitmq.url_secret)", secret, key)
		case err != nil:
			return "", fmt.Errorf("reading secret %q: %w", secret, err)
		}
		u := strings.TrimSpace(string(b))
		if u == "" {
			return "", fmt.Errorf("secret %q's key %q is empty (rabbitmq.url_secret)", secret, key)
		}
		return u, nil
	}
}

// writeStatus copies c's status to the trigger's until ctx ends, then once more (disconnected).
func (r *Runner) writeStatus(ctx context.Context, name string, c *rabbitmq.Consumer, base [2]int64) {
	fields := func(s rabbitmq.Status) map[string]any {
		return map[string]any{"connected": s.Connected, "lastError": s.LastError, "inFlight": s.InFlight,
			"deliveredTotal": base[0] + s.Delivered, "deadLetteredTotal": base[1] + s.DeadLettered}
	}
	var last map[string]any
	for {
		changed := c.Changed()
		f := fields(c.Status())
		if !mapsEqual(f, last) {
			if err := r.patch(ctx, name, f); err == nil {
				last = f
			} else if apierrors.IsNotFound(err) {
				return
			} else if ctx.Err() == nil {
				r.Log.Warn("writing a trigger's status", "trigger", name, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			// The consumer has stopped (or is stopping: stopOne waits for it first).
			final := fields(c.Status())
			final["connected"], final["inFlight"] = false, 0
			fctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			r.patch(fctx, name, final)
			cancel()
			return
		case <-changed:
		case <-time.After(5 * time.Second): // a failed write is tried again
		}
		select {
		case <-ctx.Done():
		case <-time.After(StatusEvery):
		}
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// patch merges fields into the trigger's status (the consumer's fields only: the Trigger
// reconciler writes the others).
func (r *Runner) patch(ctx context.Context, name string, fields map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": fields})
	if err != nil {
		return err
	}
	tr := &slessv1.Trigger{}
	tr.Namespace, tr.Name = r.Namespace, name
	return r.Client.Status().Patch(ctx, tr, client.RawPatch(types.MergePatchType, body))
}

// stopOne ends name's consumer, if it runs, and waits for it and its status writer; it reports
// whether one ran.
func (r *Runner) stopOne(name string) bool {
	r.mu.Lock()
	run := r.run[name]
	delete(r.run, name)
	r.mu.Unlock()
	if run == nil {
		return false
	}
	run.cancel()
	run.done.Wait()
	st := run.c.Status()
	r.mu.Lock()
	if r.totals == nil {
		r.totals = map[string][2]int64{}
	}
	r.totals[name] = [2]int64{run.base[0] + st.Delivered, run.base[1] + st.DeadLettered}
	r.mu.Unlock()
	return true
}

// stopAll ends every consumer (the pod stopping): nothing in flight is acknowledged.
func (r *Runner) stopAll() {
	r.mu.Lock()
	if r.stop == nil {
		r.stop = make(chan struct{})
	}
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	runs := r.run
	r.run = map[string]*consuming{}
	r.mu.Unlock()
	for _, run := range runs {
		run.cancel()
	}
	r.wg.Wait()
}

// tokenTransport adds the namespace's event token, read from its file, to every request.
type tokenTransport struct {
	file string
	next http.RoundTripper

	mu    sync.Mutex
	token string
	read  time.Time
}

// tokenReread is how long a token read from its file is used: the file changes only when the
// install's key is rotated (the kubelet then rewrites it), and a delivery should not cost a read.
const tokenReread = 30 * time.Second

func (t *tokenTransport) current() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Since(t.read) < tokenReread {
		return t.token, nil
	}
	b, err := os.ReadFile(t.file)
	if err != nil {
		return "", fmt.Errorf("reading the event token: %w", err)
	}
	t.token, t.read = strings.TrimSpace(string(b)), time.Now()
	return t.token, nil
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := t.current()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set(apiv1.HeaderEventToken, token)
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(req)
}
