package objects

import (
	"context"
	"slices"
	"sync"

	"github.com/sless-dev/sless/api/apiv1"
)

// InvocationRing keeps the last N invocations per function in memory: the unit tests' store, the
// single host's index over what it persists in bbolt, and the Kubernetes backend's history when no
// database is configured (api/pgstore keeps it in PostgreSQL).
type InvocationRing struct {
	n  int
	mu sync.Mutex
	m  map[string]*ring
}

// ring grows to n records, then overwrites the oldest: a function called once costs one record,
// not n.
type ring struct {
	items []apiv1.Invocation
	next  int // where the next record goes once the ring is full
}

var _ Invocations = (*InvocationRing)(nil)

// NewInvocationRing keeps n records per function (1,000 if n ≤ 0).
func NewInvocationRing(n int) *InvocationRing {
	if n <= 0 {
		n = 1000
	}
	return &InvocationRing{n: n, m: map[string]*ring{}}
}

// Record adds one invocation, dropping the oldest when full.
func (r *InvocationRing) Record(_ context.Context, ns, name string, inv apiv1.Invocation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := ns + "/" + name
	rg := r.m[k]
	if rg == nil {
		rg = &ring{}
		r.m[k] = rg
	}
	if len(rg.items) < r.n {
		rg.items = append(rg.items, inv)
		return
	}
	rg.items[rg.next] = inv
	rg.next = (rg.next + 1) % r.n
}

// List returns up to q.Limit records strictly older than q.Before (if set), newest first.
func (r *InvocationRing) List(_ context.Context, ns, name string, q InvocationQuery) ([]apiv1.Invocation, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultInvocationLimit
	}
	r.mu.Lock()
	rg := r.m[ns+"/"+name]
	out := []apiv1.Invocation{}
	if rg != nil {
		n := len(rg.items)
		newest := (rg.next - 1 + n) % n // rg.next is 0 until the ring is full: the newest is the last
		for i := range n {
			if inv := rg.items[(newest-i+n)%n]; q.Before.IsZero() || inv.Time.Before(q.Before) {
				out = append(out, inv)
			}
		}
	}
	r.mu.Unlock()
	// Records arrive as calls end, not as they start (their Time): order by Time, so that a
	// before cursor pages without skipping or repeating.
	slices.SortStableFunc(out, func(a, b apiv1.Invocation) int { return b.Time.Compare(a.Time) })
	return out[:min(limit, len(out))], nil
}

// Forget drops a function's records (when it is deleted).
func (r *InvocationRing) Forget(_ context.Context, ns, name string) error {
	r.mu.Lock()
	delete(r.m, ns+"/"+name)
	r.mu.Unlock()
	return nil
}
