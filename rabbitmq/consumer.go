package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sless-dev/sless/delivery"
)

// Defaults of Config's zero fields.
const (
	DefaultPrefetch     = 10
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 30 * time.Second
	// dialTimeout bounds a TCP connect and the AMQP handshake after it.
	dialTimeout = 10 * time.Second
)

// Headers a dead letter carries beside the message's own.
const (
	HeaderError    = "x-sless-error"    // why it was given up: the last failure
	HeaderAttempts = "x-sless-attempts" // counted attempts
	HeaderQueue    = "x-sless-queue"    // the queue it came from
)

// Config is one trigger's consumer.
type Config struct {
	// URL is the broker's amqp:// or amqps:// URL with its credentials (the trigger's secret).
	URL string
	// URLFunc, when set instead of URL, is asked for the URL before every connection (a secret
	// read from a file the kubelet keeps current: a rotated URL is used at the next reconnect);
	// its error, or a URL that does not parse, becomes the status's last error and is retried
	// with the connection backoff.
	URLFunc func() (string, error)
	// Queue is consumed; declared durable unless Passive (then it must exist).
	Queue   string
	Passive bool
	// DeadLetter is the queue failed messages go to, always declared (durable): RabbitMQ drops a
	// publish to a missing queue without a word.
	DeadLetter string
	// Prefetch bounds the messages in flight (unacknowledged); 1 keeps them in order.
	Prefetch int
	Policy   delivery.Policy
	// CheckAddr, when set, is asked about every address the broker's host resolves to before
	// each connection; an error refuses the connection (it becomes the status's last error).
	CheckAddr func(addr netip.AddrPort) error
	// Name is advertised to the broker as the connection's name (shown by rabbitmqctl).
	Name string
	// ReconnectMin and ReconnectMax bound the backoff between connection attempts.
	ReconnectMin, ReconnectMax time.Duration
}

// Message is what an Invoker gets of a delivery.
type Message struct {
	Body          []byte
	ContentType   string
	MessageID     string
	CorrelationID string
	Exchange      string
	RoutingKey    string
	Redelivered   bool
	Timestamp     time.Time
	Headers       map[string]any
	// Attempt counts this consumer's attempts at the message, from 1, back-pressure retries
	// included. DeliveryCount is the broker's count when it keeps one (a quorum queue's
	// x-delivery-count), else the attempts this consumer made.
	Attempt, DeliveryCount int
}

// Invoker hands a message to the function and says what came of it.
type Invoker interface {
	Invoke(ctx context.Context, m Message) delivery.Outcome
}

// InvokerFunc is an Invoker of a function.
type InvokerFunc func(ctx context.Context, m Message) delivery.Outcome

// Invoke calls f.
func (f InvokerFunc) Invoke(ctx context.Context, m Message) delivery.Outcome { return f(ctx, m) }

// Status is what the trigger's status shows of its consumer.
type Status struct {
	Connected    bool
	LastError    string
	InFlight     int
	Delivered    int64 // acknowledged after a 2xx
	DeadLettered int64
	Retried      int64 // attempts tried again (back-pressure included)
	// Sessions counts the connections that got as far as consuming.
	Sessions int64
}

// Result is one message's end or one retry, for metrics and events.
type Result struct {
	Message  Message
	Decision delivery.Decision
	Outcome  delivery.Outcome
}

// Consumer runs one trigger's consumer until its context ends.
type Consumer struct {
	cfg Config
	inv Invoker
	// observe, when set, hears of every decision (metrics, events); it must not block.
	observe func(Result)

	mu     sync.Mutex
	status Status
	notify chan struct{} // closed and replaced at every status change
}

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("rabbitmq: invalid configuration")

// New checks cfg and returns its consumer; Run starts it. observe may be nil.
func New(cfg Config, inv Invoker, observe func(Result)) (*Consumer, error) {
	switch {
	case cfg.URL == "" && cfg.URLFunc == nil:
		return nil, fmt.Errorf("%w: no broker URL", ErrConfig)
	case cfg.URL != "" && cfg.URLFunc != nil:
		return nil, fmt.Errorf("%w: both URL and URLFunc", ErrConfig)
	case cfg.Queue == "":
		return nil, fmt.Errorf("%w: no queue", ErrConfig)
	case cfg.DeadLetter == "":
		return nil, fmt.Errorf("%w: no dead-letter queue", ErrConfig)
	case cfg.DeadLetter == cfg.Queue:
		return nil, fmt.Errorf("%w: the dead-letter queue is the queue itself", ErrConfig)
	case inv == nil:
		return nil, fmt.Errorf("%w: no invoker", ErrConfig)
	}
	if cfg.URLFunc == nil {
		if err := checkURL(cfg.URL); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = DefaultReconnectMin
	}
	if cfg.ReconnectMax <= 0 {
		cfg.ReconnectMax = DefaultReconnectMax
	}
	return &Consumer{cfg: cfg, inv: inv, observe: observe, notify: make(chan struct{})}, nil
}

// Status is the consumer's status now.
func (c *Consumer) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Changed is closed at the next change of Status.
func (c *Consumer) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notify
}

func (c *Consumer) update(f func(*Status)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.status)
	close(c.notify)
	c.notify = make(chan struct{})
}

// Run consumes until ctx ends, reconnecting with backoff after every lost connection or refusal.
// Messages in flight when a connection is lost are not acknowledged: the broker delivers them
// again.
func (c *Consumer) Run(ctx context.Context) {
	wait := c.cfg.ReconnectMin
	for ctx.Err() == nil {
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if connected {
			wait = c.cfg.ReconnectMin
		}
		c.update(func(s *Status) {
			s.Connected = false
			if err != nil {
				s.LastError = err.Error()
			}
		})
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, c.cfg.ReconnectMax)
	}
	c.update(func(s *Status) { s.Connected = false })
}

// session is one connection: it declares, consumes and returns why it ended; connected says
// whether it got as far as consuming.
func (c *Consumer) session(ctx context.Context) (connected bool, err error) {
	brokerURL := c.cfg.URL
	if c.cfg.URLFunc != nil {
		if brokerURL, err = c.cfg.URLFunc(); err != nil {
			return false, err
		}
		if err := checkURL(brokerURL); err != nil {
			return false, err
		}
	}
	conn, err := amqp.DialConfig(brokerURL, amqp.Config{
		Dial:       c.dial(ctx),
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": c.cfg.Name, "product": "sless"},
	})
	if err != nil {
		return false, fmt.Errorf("connecting to the broker: %w", redact(err, brokerURL))
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))

	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel: %w", err)
	}
	if c.cfg.Passive {
		_, err = ch.QueueDeclarePassive(c.cfg.Queue, true, false, false, false, nil)
	} else {
		_, err = ch.QueueDeclare(c.cfg.Queue, true, false, false, false, nil)
	}
	if err != nil {
		return false, fmt.Errorf("declaring queue %q: %w", c.cfg.Queue, err)
	}
	// Dead letters go through a channel of their own in confirm mode: a message is acknowledged
	// only once the broker has taken its dead letter.
	pub, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel: %w", err)
	}
	if _, err := pub.QueueDeclare(c.cfg.DeadLetter, true, false, false, false, nil); err != nil {
		return false, fmt.Errorf("declaring dead-letter queue %q: %w", c.cfg.DeadLetter, err)
	}
	if err := pub.Confirm(false); err != nil {
		return false, fmt.Errorf("confirm mode: %w", err)
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("prefetch %d: %w", c.cfg.Prefetch, err)
	}
	deliveries, err := ch.Consume(c.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consuming queue %q: %w", c.cfg.Queue, err)
	}
	c.update(func(s *Status) { s.Connected, s.LastError = true, ""; s.Sessions++ })

	// Handlers stop when the session does; what they had not acknowledged is delivered again.
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case e := <-closed:
			if e == nil {
				return true, errors.New("the broker closed the connection")
			}
			return true, fmt.Errorf("connection lost: %w", e)
		case d, ok := <-deliveries:
			if !ok {
				// The broker cancels a consumer whose queue was deleted.
				return true, fmt.Errorf("the broker ended consuming queue %q (was it deleted?)", c.cfg.Queue)
			}
			wg.Add(1)
			c.update(func(s *Status) { s.InFlight++ })
			go func() {
				defer wg.Done()
				defer c.update(func(s *Status) { s.InFlight-- })
				c.handle(sctx, pub, d)
			}()
		}
	}
}

// handle tries one delivery until it is acknowledged, dead-lettered or its session ends.
func (c *Consumer) handle(ctx context.Context, pub *amqp.Channel, d amqp.Delivery) {
	m := message(d)
	brokerCount, kept := deliveryCount(d)
	counted := 0
	for attempt := 1; ; attempt++ {
		m.Attempt, m.DeliveryCount = attempt, attempt
		if kept {
			m.DeliveryCount = brokerCount + attempt - 1
		}
		out := c.inv.Invoke(ctx, m)
		if ctx.Err() != nil {
			return // the session ended: not acknowledged, so delivered again
		}
		dec := c.cfg.Policy.Decide(out, counted)
		if dec.Counts {
			counted++
		}
		if c.observe != nil {
			c.observe(Result{Message: m, Decision: dec, Outcome: out})
		}
		switch dec.Action {
		case delivery.Ack:
			if d.Ack(false) == nil {
				c.update(func(s *Status) { s.Delivered++ })
			}
			return
		case delivery.DeadLetter:
			if err := c.deadLetter(ctx, pub, d, dec.Reason, counted); err != nil {
				c.update(func(s *Status) { s.LastError = err.Error() })
				return // not acknowledged: delivered again, and tried again
			}
			if d.Ack(false) == nil {
				c.update(func(s *Status) { s.DeadLettered++; s.LastError = dec.Reason })
			}
			return
		}
		c.update(func(s *Status) { s.Retried++; s.LastError = dec.Reason })
		select {
		case <-ctx.Done():
			return
		case <-time.After(dec.After):
		}
	}
}

// deadLetter publishes d to the dead-letter queue, persistent, with its properties and headers and
// why it failed, and waits for the broker's confirm.
func (c *Consumer) deadLetter(ctx context.Context, pub *amqp.Channel, d amqp.Delivery, reason string, attempts int) error {
	h := amqp.Table{}
	maps.Copy(h, d.Headers)
	h[HeaderError] = reason
	h[HeaderAttempts] = int32(attempts)
	h[HeaderQueue] = c.cfg.Queue
	conf, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", c.cfg.DeadLetter, false, false, amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: amqp.Persistent,
		CorrelationId: d.CorrelationId, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId,
		Body: d.Body,
	})
	if err != nil {
		return fmt.Errorf("dead-lettering to %q: %w", c.cfg.DeadLetter, err)
	}
	ok, err := conf.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("dead-lettering to %q: %w", c.cfg.DeadLetter, err)
	case !ok:
		return fmt.Errorf("dead-lettering to %q: the broker refused it", c.cfg.DeadLetter)
	}
	return nil
}

// checkURL says what is wrong with a broker URL without quoting it (the parser's error may,
// credentials included).
func checkURL(u string) error {
	if _, err := amqp.ParseURI(u); err != nil {
		return errors.New("the broker URL is not an amqp:// or amqps:// URL")
	}
	return nil
}

func message(d amqp.Delivery) Message {
	m := Message{Body: d.Body, ContentType: d.ContentType, MessageID: d.MessageId, CorrelationID: d.CorrelationId,
		Exchange: d.Exchange, RoutingKey: d.RoutingKey, Redelivered: d.Redelivered, Timestamp: d.Timestamp, Headers: map[string]any(d.Headers)}
	return m
}

// deliveryCount is a quorum queue's x-delivery-count: the earlier deliveries, so this one is +1.
func deliveryCount(d amqp.Delivery) (int, bool) {
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(v) + 1, true
	case int32:
		return int(v) + 1, true
	case int:
		return v + 1, true
	}
	return 0, false
}

// dial resolves the broker's host, asks CheckAddr about every address, then connects to a checked
// address (never resolving again: a second answer could differ).
func (c *Consumer) dial(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("port %q: %w", portStr, err)
		}
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		ips, err := net.DefaultResolver.LookupNetIP(dctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
		var targets []netip.AddrPort
		for _, ip := range ips {
			ap := netip.AddrPortFrom(ip.Unmap(), uint16(port))
			if c.cfg.CheckAddr != nil {
				if err := c.cfg.CheckAddr(ap); err != nil {
					return nil, fmt.Errorf("broker %s resolves to %s: %w", host, ap, err)
				}
			}
			targets = append(targets, ap)
		}
		var last error
		for _, ap := range targets {
			var d net.Dialer
			conn, err := d.DialContext(dctx, network, ap.String())
			if err != nil {
				last = err
				continue
			}
			// The TLS and AMQP handshakes get the rest of the dial's time (amqp091 clears the
			// deadline once the connection is open).
			deadline, _ := dctx.Deadline()
			conn.SetDeadline(deadline)
			return conn, nil
		}
		if last == nil {
			last = fmt.Errorf("%s has no address", host)
		}
		return nil, last
	}
}

// redact removes the URL's credentials from err's text (a parse or dial error may quote the URL):
// the URL and its user:password@ part wherever they appear. (Not the bare password: a short one
// would mangle the words around it.)
func redact(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return redacted{err, []string{rawURL}}
	}
	return redacted{err, []string{rawURL, u.User.String() + "@"}}
}

type redacted struct {
	err  error
	hide []string
}

func (r redacted) Error() string {
	s := r.err.Error()
	for _, h := range r.hide {
		if h != "" {
			s = strings.ReplaceAll(s, h, "xxxxx")
		}
	}
	return s
}

func (r redacted) Unwrap() error { return r.err }
