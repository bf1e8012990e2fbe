package state

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// KeepInvocations is how many records are kept per function.
const KeepInvocations = 1000

// Invocations serves from an in-memory ring and writes new records to bbolt once a second in one
// transaction (FlushLoop): a commit (an fsync) per request would cap the proxy at the disk's sync
// rate.
type Invocations struct {
	ring    *objects.InvocationRing
	db      *bolt.DB
	mu      sync.Mutex
	pending []pendingInvocation
	seq     uint64
}

type pendingInvocation struct {
	ns, name string
	inv      apiv1.Invocation
}

var _ objects.Invocations = (*Invocations)(nil)

// loadInvocations fills the ring from what the last run persisted.
func loadInvocations(db *bolt.DB) (*Invocations, error) {
	iv := &Invocations{ring: objects.NewInvocationRing(KeepInvocations), db: db}
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInvocations).ForEach(func(k, v []byte) error {
			parts := strings.SplitN(string(k), "/", 3) // ns/name/<time><seq>
			if len(parts) != 3 {
				return nil
			}
			var inv apiv1.Invocation
			if json.Unmarshal(v, &inv) == nil {
				iv.ring.Record(context.Background(), parts[0], parts[1], inv)
			}
			return nil
		})
	})
	return iv, err
}

// Record keeps one invocation (persisted by the next flush).
func (iv *Invocations) Record(ctx context.Context, ns, name string, inv apiv1.Invocation) {
	iv.ring.Record(ctx, ns, name, inv)
	iv.mu.Lock()
	iv.pending = append(iv.pending, pendingInvocation{ns, name, inv})
	iv.mu.Unlock()
}

// List returns up to q.Limit records older than q.Before (if set), newest first, from the ring
// that holds everything kept (the newest KeepInvocations per function, persisted or pending).
func (iv *Invocations) List(ctx context.Context, ns, name string, q objects.InvocationQuery) ([]apiv1.Invocation, error) {
	return iv.ring.List(ctx, ns, name, q)
}

// Forget drops a deleted function's records.
func (iv *Invocations) Forget(ctx context.Context, ns, name string) error {
	iv.Flush() // what is pending for it must not come back after the delete
	iv.ring.Forget(ctx, ns, name)
	return iv.db.Update(func(tx *bolt.Tx) error { return deletePrefix(tx.Bucket(bucketInvocations), ns+"/"+name+"/") })
}

// FlushLoop persists pending records every interval until ctx ends, then once more.
func (iv *Invocations) FlushLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			iv.Flush()
			return
		case <-t.C:
			iv.Flush()
		}
	}
}

// Flush persists the pending records in one transaction, keeping the newest KeepInvocations per
// function.
func (iv *Invocations) Flush() error {
	iv.mu.Lock()
	batch := iv.pending
	iv.pending = nil
	iv.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	touched := map[string]bool{}
	return iv.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketInvocations)
		for _, p := range batch {
			iv.seq++
			k := fmt.Sprintf("%s/%s/%020d%06d", p.ns, p.name, p.inv.Time.UnixNano(), iv.seq%1_000_000)
			if err := put(b, []byte(k), p.inv); err != nil {
				return err
			}
			touched[p.ns+"/"+p.name+"/"] = true
		}
		for prefix := range touched {
			var keys [][]byte
			c := b.Cursor()
			for k, _ := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, _ = c.Next() {
				keys = append(keys, append([]byte(nil), k...))
			}
			for i := 0; i < len(keys)-KeepInvocations; i++ {
				if err := b.Delete(keys[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
