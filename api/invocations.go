package api

import (
	"context"
	"sync"

	"github.com/sless-dev/sless/api/apiv1"
)

// InvocationRing keeps the last N invocations per function in memory (the Kubernetes backend's
// records until a durable store exists; the single host persists its own).
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

// List returns up to limit records, newest first.
func (r *InvocationRing) List(_ context.Context, ns, name string, limit int) ([]apiv1.Invocation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rg := r.m[ns+"/"+name]
	out := []apiv1.Invocation{}
	if rg == nil {
		return out, nil
	}
	n := len(rg.items)
	newest := (rg.next - 1 + n) % n // rg.next is 0 until the ring is full: the newest is the last
	for i := 0; i < n && len(out) < limit; i++ {
		out = append(out, rg.items[(newest-i+n)%n])
	}
	return out, nil
}

// Forget drops a function's records (when it is deleted).
func (r *InvocationRing) Forget(_ context.Context, ns, name string) error {
	r.mu.Lock()
	delete(r.m, ns+"/"+name)
	r.mu.Unlock()
	return nil
}
