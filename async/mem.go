package async

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// Persist writes changes through to durable storage before MemQueue applies them: put are events
// created or changed, del the ids of events dropped. An error aborts the change.
type Persist func(put []objects.AsyncEvent, del []string) error

// MemQueue is objects.AsyncQueue in memory: the unit tests' queue, and the single host's, which
// gives it a Persist writing each change to bbolt and loads it from there at start (Load). Claims
// and lease extensions stay in memory (Load takes back what was running): an event costs two
// writes, its enqueue and its settle.
type MemQueue struct {
	persist Persist

	mu     sync.Mutex
	events map[string]*objects.AsyncEvent
	// due orders pending events by when a dispatcher may take them (NextAttempt, or LeaseUntil
	// while running); entries are checked against the event on the way out (lazy deletion).
	due dueHeap
	// pending counts each function's events not done.
	pending map[fnKey]int
}

type fnKey struct{ ns, name string }

var _ objects.AsyncQueue = (*MemQueue)(nil)

// NewMemQueue makes an empty queue; persist may be nil (memory only).
func NewMemQueue(persist Persist) *MemQueue {
	return &MemQueue{persist: persist, events: map[string]*objects.AsyncEvent{}, pending: map[fnKey]int{}}
}

// Load adds stored events (at start, before any other call). Running ones are taken back as
// queued, due now: in one process, whoever ran them is gone.
func (q *MemQueue) Load(evs []objects.AsyncEvent, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ev := range evs {
		if ev.State == apiv1.AsyncRunning {
			ev.State, ev.NextAttempt, ev.Lease, ev.LeaseUntil = apiv1.AsyncQueued, now, "", time.Time{}
		}
		q.set(ev)
	}
}

// set stores ev, keeping the counts and the due order. Called with mu held.
func (q *MemQueue) set(ev objects.AsyncEvent) {
	k := fnKey{ev.Namespace, ev.Function}
	if old, ok := q.events[ev.ID]; ok && old.Pending() {
		q.pending[k]--
	}
	e := ev
	q.events[ev.ID] = &e
	if e.Pending() {
		q.pending[k]++
		heap.Push(&q.due, dueItem{at: dueAt(e), id: e.ID, lease: e.Lease, state: e.State})
	}
	if q.pending[k] == 0 {
		delete(q.pending, k)
	}
}

func (q *MemQueue) drop(id string) {
	old, ok := q.events[id]
	if !ok {
		return
	}
	k := fnKey{old.Namespace, old.Function}
	if old.Pending() {
		if q.pending[k]--; q.pending[k] == 0 {
			delete(q.pending, k)
		}
	}
	delete(q.events, id)
}

// write persists, then applies. Called with mu held.
func (q *MemQueue) write(put []objects.AsyncEvent, del []string) error {
	if q.persist != nil && (len(put) > 0 || len(del) > 0) {
		if err := q.persist(put, del); err != nil {
			return err
		}
	}
	for _, id := range del {
		q.drop(id)
	}
	for _, ev := range put {
		q.set(ev)
	}
	return nil
}

func dueAt(e objects.AsyncEvent) time.Time {
	if e.State == apiv1.AsyncRunning {
		return e.LeaseUntil
	}
	return e.NextAttempt
}

// Enqueue implements objects.AsyncQueue.
func (q *MemQueue) Enqueue(_ context.Context, ev objects.AsyncEvent, max int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.events[ev.ID]; ok {
		return fmt.Errorf("asynchronous invocation %s: %w", ev.ID, objects.ErrAlreadyExists)
	}
	if q.pending[fnKey{ev.Namespace, ev.Function}] >= max {
		return objects.ErrQueueFull
	}
	ev.State = apiv1.AsyncQueued
	return q.write([]objects.AsyncEvent{ev}, nil)
}

// Claim implements objects.AsyncQueue.
func (q *MemQueue) Claim(_ context.Context, now time.Time, lease time.Duration, n int) ([]objects.AsyncEvent, time.Time, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var claimed []objects.AsyncEvent
	taken := map[string]bool{}
	for len(q.due) > 0 && len(claimed) < n {
		it := q.due[0]
		ev, ok := q.events[it.id]
		if !ok || taken[it.id] || !ev.Pending() || ev.State != it.state || ev.Lease != it.lease || !dueAt(*ev).Equal(it.at) {
			heap.Pop(&q.due) // an outdated entry
			continue
		}
		if it.at.After(now) {
			break
		}
		heap.Pop(&q.due)
		taken[it.id] = true
		c := *ev
		c.State, c.Lease, c.LeaseUntil = apiv1.AsyncRunning, newLease(), now.Add(lease)
		claimed = append(claimed, c)
	}
	// Claims are not persisted: one process holds a MemQueue, and Load queues again whatever was
	// running when it stopped, so a lease on disk would never be read.
	for _, c := range claimed {
		q.set(c)
	}
	return claimed, q.next(), nil
}

// next is when the earliest pending event is due, dropping outdated entries. Called with mu held.
func (q *MemQueue) next() time.Time {
	for len(q.due) > 0 {
		it := q.due[0]
		ev, ok := q.events[it.id]
		if ok && ev.Pending() && ev.State == it.state && ev.Lease == it.lease && dueAt(*ev).Equal(it.at) {
			return it.at
		}
		heap.Pop(&q.due)
	}
	return time.Time{}
}

func newLease() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// held returns the event held under ev.Lease. Called with mu held.
func (q *MemQueue) held(ev objects.AsyncEvent) (*objects.AsyncEvent, error) {
	cur, ok := q.events[ev.ID]
	if !ok || cur.State != apiv1.AsyncRunning || cur.Lease != ev.Lease || ev.Lease == "" {
		return nil, fmt.Errorf("asynchronous invocation %s is not held under this lease any more: %w", ev.ID, objects.ErrConflict)
	}
	return cur, nil
}

// Extend implements objects.AsyncQueue.
func (q *MemQueue) Extend(_ context.Context, ev objects.AsyncEvent, until time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, err := q.held(ev)
	if err != nil {
		return err
	}
	c := *cur
	c.LeaseUntil = until
	q.set(c) // not persisted, as claims are not
	return nil
}

// Settle implements objects.AsyncQueue.
func (q *MemQueue) Settle(_ context.Context, ev objects.AsyncEvent) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, err := q.held(ev)
	if err != nil {
		return err
	}
	c := *cur
	c.State, c.Attempts, c.Counted, c.Error, c.NextAttempt = ev.State, ev.Attempts, ev.Counted, ev.Error, ev.NextAttempt
	c.Lease, c.LeaseUntil = "", time.Time{}
	return q.write([]objects.AsyncEvent{c}, nil)
}

// Get implements objects.AsyncQueue.
func (q *MemQueue) Get(_ context.Context, ns, name, id string) (objects.AsyncEvent, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ev, ok := q.events[id]
	if !ok || ev.Namespace != ns || ev.Function != name {
		return objects.AsyncEvent{}, fmt.Errorf("asynchronous invocation %s: %w", id, objects.ErrNotFound)
	}
	return *ev, nil
}

// DeadLetters implements objects.AsyncQueue.
func (q *MemQueue) DeadLetters(_ context.Context, ns, name string, limit int) ([]objects.AsyncEvent, error) {
	q.mu.Lock()
	var out []objects.AsyncEvent
	for _, ev := range q.events {
		if ev.Namespace == ns && ev.Function == name && ev.State == apiv1.AsyncDeadLettered {
			out = append(out, *ev)
		}
	}
	q.mu.Unlock()
	sortNewestFirst(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// sortNewestFirst orders events by id descending: ids sort by creation time.
func sortNewestFirst(evs []objects.AsyncEvent) {
	slices.SortFunc(evs, func(a, b objects.AsyncEvent) int { return cmp.Compare(b.ID, a.ID) })
}

// Redrive implements objects.AsyncQueue.
func (q *MemQueue) Redrive(_ context.Context, ns, name, id string, now time.Time, max int) (objects.AsyncEvent, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ev, ok := q.events[id]
	if !ok || ev.Namespace != ns || ev.Function != name {
		return objects.AsyncEvent{}, fmt.Errorf("asynchronous invocation %s: %w", id, objects.ErrNotFound)
	}
	if ev.State != apiv1.AsyncDeadLettered {
		return objects.AsyncEvent{}, fmt.Errorf("asynchronous invocation %s is %s, not dead_lettered: %w", id, ev.State, objects.ErrConflict)
	}
	if q.pending[fnKey{ns, name}] >= max {
		return objects.AsyncEvent{}, objects.ErrQueueFull
	}
	c := Redriven(*ev, now)
	if err := q.write([]objects.AsyncEvent{c}, nil); err != nil {
		return objects.AsyncEvent{}, err
	}
	return c, nil
}

// Redriven is ev sent back from the dead letters at now: queued, due now, its retries counted
// from 0 and its age from now; its attempts kept.
func Redriven(ev objects.AsyncEvent, now time.Time) objects.AsyncEvent {
	ev.State, ev.NextAttempt, ev.Counted, ev.Enqueued, ev.Redriven = apiv1.AsyncQueued, now, 0, now, now
	ev.Lease, ev.LeaseUntil = "", time.Time{}
	return ev
}

// Forget implements objects.AsyncQueue.
func (q *MemQueue) Forget(_ context.Context, ns, name string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var del []string
	for id, ev := range q.events {
		if ev.Namespace == ns && ev.Function == name {
			del = append(del, id)
		}
	}
	return q.write(nil, del)
}

// Purge implements objects.AsyncQueue.
func (q *MemQueue) Purge(_ context.Context, succeeded, dead time.Time) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var del []string
	for id, ev := range q.events {
		if ev.State == apiv1.AsyncSucceeded && Finished(*ev).Before(succeeded) || ev.State == apiv1.AsyncDeadLettered && Finished(*ev).Before(dead) {
			del = append(del, id)
		}
	}
	return len(del), q.write(nil, del)
}

// Finished is when a done event was done: its last attempt's time (its creation if it has none).
func Finished(ev objects.AsyncEvent) time.Time {
	if n := len(ev.Attempts); n > 0 {
		return ev.Attempts[n-1].Time
	}
	return ev.Enqueued
}

// Stats implements objects.AsyncQueue.
func (q *MemQueue) Stats(context.Context) ([]objects.AsyncStats, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := map[fnKey]*objects.AsyncStats{}
	for _, ev := range q.events {
		if ev.Pending() || ev.State == apiv1.AsyncDeadLettered {
			k := fnKey{ev.Namespace, ev.Function}
			s := m[k]
			if s == nil {
				s = &objects.AsyncStats{Namespace: k.ns, Function: k.name}
				m[k] = s
			}
			if ev.State == apiv1.AsyncDeadLettered {
				s.DeadLetters++
				continue
			}
			s.Depth++
			if s.Oldest.IsZero() || ev.Enqueued.Before(s.Oldest) {
				s.Oldest = ev.Enqueued
			}
		}
	}
	out := make([]objects.AsyncStats, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b objects.AsyncStats) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Function, b.Function))
	})
	return out, nil
}

type dueItem struct {
	at    time.Time
	id    string
	lease string
	state apiv1.AsyncState
}

type dueHeap []dueItem

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].id < h[j].id
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
