package local

import "sync"

// queue hands keys to workers: a key queued while it is being processed runs again afterwards, and
// never twice at once, so each function and job is reconciled by one worker at a time.
type queue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []string
	queued  map[string]bool
	busy    map[string]bool
	dirty   map[string]bool
	closed  bool
}

func newQueue() *queue {
	q := &queue{queued: map[string]bool{}, busy: map[string]bool{}, dirty: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy[key] {
		q.dirty[key] = true
		return
	}
	if !q.queued[key] {
		q.queued[key] = true
		q.pending = append(q.pending, key)
		q.cond.Signal()
	}
}

// next blocks for a key; ok is false once the queue is closed.
func (q *queue) next() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.pending) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	k := q.pending[0]
	q.pending = q.pending[1:]
	delete(q.queued, k)
	q.busy[k] = true
	return k, true
}

func (q *queue) done(key string) {
	q.mu.Lock()
	delete(q.busy, key)
	again := q.dirty[key]
	delete(q.dirty, key)
	q.mu.Unlock()
	if again {
		q.add(key)
	}
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
