package fnlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/codestore"
)

// BuildKey is where a function's last build log is kept.
func BuildKey(ns, name string) string { return codestore.Prefix(ns, name) + "logs/build.ndjson" }

// EventsKey is where a function's events are kept.
func EventsKey(ns, name string) string { return codestore.Prefix(ns, name) + "logs/events.ndjson" }

// StoppedPrefix holds the logs of a function's stopped instances, one object per instance. They
// live apart from the code (stoppedRoot): collecting them lists only them, and those of a deleted
// function go within KeepStopped all the same.
func StoppedPrefix(ns, name string) string { return stoppedRoot + ns + "/" + name + "/" }

const stoppedRoot = "logs/stopped/"

// StoppedKey is where the log of stopped instance inst is kept.
func StoppedKey(ns, name, inst string) string { return StoppedPrefix(ns, name) + inst + ".ndjson" }

// KeepStopped is how long a stopped instance's log stays readable.
const KeepStopped = time.Hour

// MaxEvents is how many events of a function are kept (the oldest go first).
const MaxEvents = 200

// MaxLines and MaxBytes bound a log kept in the code store (a build's, a stopped instance's): the
// last lines.
const (
	MaxLines = apiv1.MaxLogTail
	MaxBytes = 4 << 20
)

// Clip cuts s to apiv1.MaxLogLine bytes (on a rune boundary) and makes it valid UTF-8.
func Clip(s string) string {
	if len(s) > apiv1.MaxLogLine {
		cut := apiv1.MaxLogLine
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Select keeps the lines at or after since (zero: all) and of those the last tail (tail < 0: all).
func Select(lines []apiv1.LogLine, since time.Time, tail int) []apiv1.LogLine {
	i := 0
	if !since.IsZero() {
		for i < len(lines) && lines[i].Time.Before(since) {
			i++
		}
	}
	lines = lines[i:]
	if tail >= 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	return lines
}

// encode writes items as NDJSON.
func encode[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

// maxEncodedLine bounds one stored NDJSON line: a clipped line of control bytes encodes each as
// \u00XX, six bytes.
const maxEncodedLine = 6*apiv1.MaxLogLine + 4<<10

// decode reads NDJSON. A line that does not parse is skipped (one damaged line costs that line,
// not the log); only the reader's own failure is an error.
func decode[T any](r io.Reader) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEncodedLine)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var it T
		if json.Unmarshal(sc.Bytes(), &it) == nil {
			out = append(out, it)
		}
	}
	return out, sc.Err()
}

// Save stores items under key as NDJSON, replacing what was there.
func Save[T any](ctx context.Context, store codestore.Store, key string, items []T) error {
	var b bytes.Buffer
	if err := encode(&b, items); err != nil {
		return err
	}
	// A seekable body: S3 over plain HTTP refuses one it cannot rewind.
	return store.Put(ctx, key, bytes.NewReader(b.Bytes()), int64(b.Len()))
}

// Load reads what Save stored under key; nothing stored is no items and no error.
func Load[T any](ctx context.Context, store codestore.Store, key string) ([]T, error) {
	rc, err := store.Get(ctx, key)
	if errors.Is(err, codestore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return decode[T](rc)
}

// Log collects lines in memory, the last MaxLines of them: a build's, kept by Save when it ends.
// It is safe for concurrent use; the zero value is not (use NewLog).
type Log struct {
	instance, stream string
	now              func() time.Time

	mu      sync.Mutex
	lines   *Tail
	partial []byte // Write's unfinished line
}

// Tail keeps the last lines added: at most max of them and maxBytes of their text (the last line
// always). Adding is O(1) amortised; the zero value is not usable (NewTail).
type Tail struct {
	buf           []apiv1.LogLine
	bytes         int
	max, maxBytes int
}

// NewTail keeps at most max lines and maxBytes of text.
func NewTail(max, maxBytes int) *Tail { return &Tail{max: max, maxBytes: maxBytes} }

// Add keeps l, dropping the oldest lines past the bounds.
func (t *Tail) Add(l apiv1.LogLine) {
	t.buf = append(t.buf, l)
	t.bytes += len(l.Line)
	for len(t.buf) > t.max || t.bytes > t.maxBytes && len(t.buf) > 1 {
		t.bytes -= len(t.buf[0].Line)
		t.buf[0] = apiv1.LogLine{} // its text can go now
		// Resliced: append moves the lines to a new array when this one is full, so the memory
		// stays within a small multiple of what is kept.
		t.buf = t.buf[1:]
	}
}

// Lines returns the lines kept, oldest first.
func (t *Tail) Lines() []apiv1.LogLine { return t.buf }

// NewLog makes a Log whose lines name instance and stream (apiv1.StreamBuild for a build).
func NewLog(instance, stream string) *Log {
	return &Log{instance: instance, stream: stream, now: time.Now, lines: NewTail(MaxLines, MaxBytes)}
}

// Printf adds one line (several if the text has newlines).
func (l *Log) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.SplitSeq(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "\n") {
		l.add(line)
	}
}

// Write adds the lines of p (an installer's output); an unfinished last line waits for the next
// Write or Flush.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial, p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		l.add(strings.TrimRight(string(buf[:i]), "\r"))
		buf = buf[i+1:]
	}
	if len(buf) > apiv1.MaxLogLine {
		l.add(string(buf))
		buf = nil
	}
	l.partial = append([]byte(nil), buf...)
	return len(p), nil
}

// Lines returns the lines so far (an unfinished one included).
func (l *Log) Lines() []apiv1.LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.add(string(l.partial))
		l.partial = nil
	}
	return append([]apiv1.LogLine(nil), l.lines.Lines()...)
}

func (l *Log) add(line string) {
	l.lines.Add(apiv1.LogLine{Time: l.now().UTC(), Instance: l.instance, Stream: l.stream, Line: Clip(line)})
}

// Events appends events to functions' event logs in the code store. Record does not wait for the
// store: a build or a start must not slow down by its own progress report. One goroutine, started
// when there is something to write, appends in order, all the events a function has queued in one
// read-modify-write. One writer per function is assumed (the backend's controller; Kubernetes: the
// leader): the read-modify-write is serialised within the process only. The API is a second,
// rare writer: it records the warning of a function write on a deprecated or blocked runtime
// before it answers; a build event appended at that very moment by another process (or another
// Events) can lose one of the two.
type Events struct {
	store codestore.Store

	mu      sync.Mutex
	queue   map[string][]apiv1.Event // by EventsKey
	order   []string                 // keys in the order they were first queued
	running bool
	idle    *sync.Cond // signalled when the writer stops with nothing queued
}

// NewEvents appends to store.
func NewEvents(store codestore.Store) *Events {
	e := &Events{store: store, queue: map[string][]apiv1.Event{}}
	e.idle = sync.NewCond(&e.mu)
	return e
}

// Record queues ev (its Time set to now when zero) for ns/name's event log, which keeps the last
// MaxEvents; a step repeated with the same reason, message and code (a build retried while its
// dependency job runs) is one event. A nil *Events records nothing.
func (e *Events) Record(_ context.Context, ns, name string, ev apiv1.Event) error {
	if e == nil {
		return nil
	}
	if ev.Type == "" {
		ev.Type = apiv1.EventNormal
	}
	ev.Message = Clip(ev.Message)
	key := EventsKey(ns, name)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC() // under the lock: a log's events are in time order
	}
	if _, ok := e.queue[key]; !ok {
		e.order = append(e.order, key)
	}
	e.queue[key] = append(e.queue[key], ev)
	if !e.running {
		e.running = true
		go e.write()
	}
	return nil
}

// Flush waits until every event recorded so far is in the store (or was given up on).
func (e *Events) Flush() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.running {
		e.idle.Wait()
	}
}

// write appends the queued events until none are left.
func (e *Events) write() {
	for {
		e.mu.Lock()
		if len(e.order) == 0 {
			e.running = false
			e.idle.Broadcast()
			e.mu.Unlock()
			return
		}
		key := e.order[0]
		e.order = e.order[1:]
		evs := e.queue[key]
		delete(e.queue, key)
		e.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		e.append(ctx, key, evs)
		cancel()
	}
}

// append adds evs to the log under key. A store that fails loses these events (not the history
// before them, nor the lifecycle: they are the author's view, the status is the platform's record).
func (e *Events) append(ctx context.Context, key string, evs []apiv1.Event) error {
	old, err := Load[apiv1.Event](ctx, e.store, key)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if n := len(old); n > 0 && old[n-1].Reason == ev.Reason && old[n-1].Message == ev.Message && old[n-1].CodeSHA256 == ev.CodeSHA256 {
			continue
		}
		old = append(old, ev)
	}
	if len(old) > MaxEvents {
		old = old[len(old)-MaxEvents:]
	}
	return Save(ctx, e.store, key, old)
}

// LoadEvents returns a function's events, oldest first.
func LoadEvents(ctx context.Context, store codestore.Store, ns, name string) ([]apiv1.Event, error) {
	return Load[apiv1.Event](ctx, store, EventsKey(ns, name))
}

// CollectStopped deletes the stopped instances' logs older than KeepStopped, of every function in
// the store. It returns how many went; a failed delete is tried again on the next call.
func CollectStopped(ctx context.Context, store codestore.Store, now time.Time) (int, error) {
	objs, err := store.List(ctx, stoppedRoot)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, o := range objs {
		if now.Sub(o.Modified) < KeepStopped {
			continue
		}
		if err := store.Delete(ctx, o.Key); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// Forget removes a function's build log, events and its stopped instances' kept logs.
func Forget(ctx context.Context, store codestore.Store, ns, name string) error {
	return errors.Join(store.DeletePrefix(ctx, codestore.Prefix(ns, name)+"logs/"), store.DeletePrefix(ctx, StoppedPrefix(ns, name)))
}
