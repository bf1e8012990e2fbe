package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/delivery"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/rabbitmq"
)

// statusEvery bounds how often a consumer's status is written to the state file: every change at
// most this often (a busy queue changes it with every message).
const statusEvery = 250 * time.Millisecond

// consumers runs this host's rabbitmq triggers: one rabbitmq.Consumer per enabled trigger whose
// function exists and whose URL secret opens, invoking through /fn/ in this process.
type consumers struct {
	p       *Platform
	metrics *delivery.Metrics
	mu      sync.Mutex
	events  http.Handler           // /fn/ for event sources (UseEvents); nil until the API is up
	record  delivery.EventRecorder // the functions' event log (UseEvents)
	run     map[string]*consuming
	wg      sync.WaitGroup
}

type consuming struct {
	key    string // the spec, generation and URL it was started with
	c      *rabbitmq.Consumer
	cancel context.CancelFunc
	done   sync.WaitGroup // the consumer and its status writer
}

func newConsumers(p *Platform) *consumers {
	return &consumers{p: p, metrics: delivery.NewMetrics(), run: map[string]*consuming{}}
}

// UseEvents gives the rabbitmq triggers' consumers /fn/ (api.Server.Events); they start once it
// is set.
func (p *Platform) UseEvents(h http.Handler, rec delivery.EventRecorder) {
	p.mq.mu.Lock()
	p.mq.events, p.mq.record = h, rec
	p.mq.mu.Unlock()
	p.ctrl.enqueueKind(func(t objects.Trigger) bool { return t.Spec.Type == apiv1.TriggerRabbitMQ })
}

// reconcile starts, restarts or stops trigger t's consumer and writes why it does not run.
func (m *consumers) reconcile(ctx context.Context, ns string, t objects.Trigger) error {
	name, gen := t.Spec.Name, t.Generation
	idle := func(reason string) error {
		m.stop(ns, name)
		return ignoreNotFound(m.p.db.Triggers.UpdateStatus(ns, name, gen, func(s *apiv1.TriggerStatus) {
			*s = apiv1.TriggerStatus{LastError: reason}
		}))
	}
	if !objects.WireTrigger(t).IsEnabled() {
		return idle("")
	}
	if _, err := m.p.db.Functions.Get(ctx, ns, t.Spec.FunctionRef); errors.Is(err, objects.ErrNotFound) {
		return idle(fmt.Sprintf("function %q does not exist", t.Spec.FunctionRef))
	} else if err != nil {
		return err
	}
	mq := t.Spec.RabbitMQ
	secret, key, err := apiv1.SplitSecretRef(mq.URLSecret)
	if err != nil {
		return idle(err.Error())
	}
	data, _, ok, err := m.p.secrets.Values(ns, secret)
	switch {
	case err != nil:
		return idle(err.Error())
	case !ok:
		return idle(fmt.Sprintf("secret %q (rabbitmq.url_secret) does not exist", secret))
	}
	url, ok := data[key]
	if !ok {
		return idle(fmt.Sprintf("secret %q has no key %q (rabbitmq.url_secret)", secret, key))
	}
	m.mu.Lock()
	events := m.events
	m.mu.Unlock()
	if events == nil {
		return nil // UseEvents enqueues every rabbitmq trigger
	}
	spec, _ := json.Marshal(t.Spec)
	sum := sha256.Sum256(fmt.Appendf(spec, "\x00%d\x00%s", gen, url))
	k := hex.EncodeToString(sum[:])
	m.mu.Lock()
	cur := m.run[ns+"/"+name]
	m.mu.Unlock()
	if cur != nil && cur.key == k {
		return nil
	}
	m.stop(ns, name)
	c, err := rabbitmq.New(rabbitmq.Config{
		URL: url, Queue: mq.Queue, Passive: mq.Passive, DeadLetter: mq.DeadLetter, Prefetch: mq.Prefetch,
		Policy:    delivery.Policy{MaxRetries: *mq.MaxRetries, Backoff: time.Duration(mq.RetryBackoffMS) * time.Millisecond},
		CheckAddr: func(ap netip.AddrPort) error { return m.p.checkBroker(ctx, ns, ap) },
		Name:      "sless trigger " + ns + "/" + name,
	}, rabbitmq.FunctionInvoker{Namespace: ns, Function: t.Spec.FunctionRef, Trigger: name, Handler: events},
		func(r rabbitmq.Result) { m.observe(ns, name, t.Spec.FunctionRef, mq.DeadLetter, r) })
	if err != nil {
		return idle(err.Error())
	}
	cctx, cancel := context.WithCancel(ctx)
	run := &consuming{key: k, c: c, cancel: cancel}
	m.mu.Lock()
	m.run[ns+"/"+name] = run
	m.mu.Unlock()
	m.wg.Add(2)
	run.done.Add(2)
	go func() { defer m.wg.Done(); defer run.done.Done(); c.Run(cctx) }()
	go func() { defer m.wg.Done(); defer run.done.Done(); m.writeStatus(cctx, ns, name, gen, c) }()
	m.p.log.Info("rabbitmq trigger consuming", "namespace", ns, "trigger", name, "queue", mq.Queue)
	return nil
}

// observe counts a delivery's outcome, and records a dead letter as a Warning event on the
// function. It must not block: fnlog.Events queues.
func (m *consumers) observe(ns, trigger, fn, dlq string, r rabbitmq.Result) {
	m.metrics.Observe(apiv1.SourceRabbitMQ, r.Decision)
	m.mu.Lock()
	rec := m.record
	m.mu.Unlock()
	if r.Decision.Action != delivery.DeadLetter || rec == nil {
		return
	}
	rec.Record(context.Background(), ns, fn, delivery.DeadLettered(r.Message.MessageID, trigger, dlq, r.Decision.Reason))
}

// writeStatus copies c's status to the trigger's until ctx ends.
func (m *consumers) writeStatus(ctx context.Context, ns, name string, gen int64, c *rabbitmq.Consumer) {
	for {
		changed := c.Changed()
		s := c.Status()
		err := m.p.db.Triggers.UpdateStatus(ns, name, gen, func(ts *apiv1.TriggerStatus) {
			*ts = apiv1.TriggerStatus{Active: true, Connected: s.Connected, LastError: s.LastError, InFlight: s.InFlight,
				DeliveredTotal: s.Delivered, DeadLetteredTotal: s.DeadLettered}
		})
		if errors.Is(err, objects.ErrNotFound) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusEvery):
		}
	}
}

// stop ends ns/name's consumer, if it runs, and waits for it and its status writer (whose last
// write would otherwise land after the caller's): what it had in flight is not acknowledged, so
// the broker delivers it again.
func (m *consumers) stop(ns, name string) {
	m.mu.Lock()
	run := m.run[ns+"/"+name]
	delete(m.run, ns+"/"+name)
	m.mu.Unlock()
	if run != nil {
		run.cancel()
		run.done.Wait()
	}
}

// stopAll ends every consumer (sless up stopping).
func (m *consumers) stopAll() {
	m.mu.Lock()
	runs := m.run
	m.run = map[string]*consuming{}
	m.mu.Unlock()
	for _, r := range runs {
		r.cancel()
	}
	m.wg.Wait()
}

// checkBroker decides whether a trigger of namespace ns may connect to ap, an address its
// broker's host resolved to: the platform dials a tenant-given address, so neither this host
// (its API, registry, index proxy…) nor what the namespace's egress rules deny, unless the
// administrator allowed the broker (--allow-broker) or the destination (--egress-allow).
func (p *Platform) checkBroker(ctx context.Context, ns string, ap netip.AddrPort) error {
	if p.allowedBroker(ap) {
		return nil
	}
	if own, err := ownAddress(ap.Addr()); err != nil || own {
		return errors.New("refused: that is an address of the platform's own host (an administrator allows a host-local broker with --allow-broker HOST:PORT)")
	}
	choice, err := p.egress.Choice(ctx, ns)
	if err != nil {
		return err
	}
	mode, allows := p.cfg.Egress.Effective(ns, choice)
	if slices.ContainsFunc(allows, func(a apiv1.EgressAllow) bool {
		return a.Prefix.Contains(ap.Addr()) && (a.Port == 0 || a.Port == ap.Port())
	}) {
		return nil
	}
	if mode == apiv1.EgressNone {
		return fmt.Errorf("refused: namespace %s's egress is %q", ns, apiv1.EgressNone)
	}
	if slices.ContainsFunc(apiv1.NeverOutside, func(r netip.Prefix) bool { return r.Contains(ap.Addr()) }) {
		return errors.New("refused: not the outside (a private, link-local, metadata or reserved address); an administrator allows it with --egress-allow or --allow-broker")
	}
	return nil
}

// allowedBroker reports whether ap is one of --allow-broker's HOST:PORT (resolved now).
func (p *Platform) allowedBroker(ap netip.AddrPort) bool {
	for _, hp := range p.cfg.AllowBrokers {
		host, port, err := net.SplitHostPort(hp)
		if err != nil || port != fmt.Sprint(ap.Port()) {
			continue
		}
		ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			if ip.Unmap() == ap.Addr() {
				return true
			}
		}
	}
	return false
}

// ownAddress reports whether a is this host's: loopback, unspecified, or on one of its interfaces.
func ownAddress(a netip.Addr) (bool, error) {
	if a.IsLoopback() || a.IsUnspecified() {
		return true, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false, err
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true, nil
			}
		}
	}
	return false, nil
}
