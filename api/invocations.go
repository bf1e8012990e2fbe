package api

import (
	"context"
	"sync"

	"github.com/sless-dev/sless/api/apiv1"
)

// InvocationRing keeps the last N invocations per function in memory. Both backends use it for now:
// records are lost on restart (DESIGN.md §6; a durable store comes later).
type InvocationRing struct {
	n  int
	mu sync.Mutex
	m  map[string]*ring
}

type ring struct {
	items []apiv1.Invocation
	next  int
	full  bool
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
		rg = &ring{items: make([]apiv1.Invocation, r.n)}
		r.m[k] = rg
	}
	rg.items[rg.next] = inv
	rg.next = (rg.next + 1) % r.n
	if rg.next == 0 {
		rg.full = true
	}
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
	count := rg.next
	if rg.full {
		count = r.n
	}
	for i := 0; i < count && len(out) < limit; i++ {
		out = append(out, rg.items[(rg.next-1-i+r.n)%r.n])
	}
	return out, nil
}

// Forget drops a function's records (when it is deleted).
func (r *InvocationRing) Forget(ns, name string) {
	r.mu.Lock()
	delete(r.m, ns+"/"+name)
	r.mu.Unlock()
}
