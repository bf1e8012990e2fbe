package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

const keepInvocations = 1000

// invocations serves from the in-memory ring and writes new records to bbolt once a second in one
// transaction: a commit (an fsync) per request would cap the proxy at the disk's sync rate.
type invocations struct {
	ring    *api.InvocationRing
	db      *bolt.DB
	mu      sync.Mutex
	pending []pendingInvocation
	seq     uint64
}

type pendingInvocation struct {
	ns, name string
	inv      apiv1.Invocation
}

var _ api.Invocations = (*invocations)(nil)

// loadInvocations fills the ring from what the last run persisted.
func loadInvocations(db *bolt.DB) (*invocations, error) {
	iv := &invocations{ring: api.NewInvocationRing(keepInvocations), db: db}
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

func (iv *invocations) Record(ctx context.Context, ns, name string, inv apiv1.Invocation) {
	iv.ring.Record(ctx, ns, name, inv)
	iv.mu.Lock()
	iv.pending = append(iv.pending, pendingInvocation{ns, name, inv})
	iv.mu.Unlock()
}

func (iv *invocations) List(ctx context.Context, ns, name string, limit int) ([]apiv1.Invocation, error) {
	return iv.ring.List(ctx, ns, name, limit)
}

// forget drops a deleted function's records.
func (iv *invocations) forget(ns, name string) error {
	iv.ring.Forget(ns, name)
	return iv.db.Update(func(tx *bolt.Tx) error { return deletePrefix(tx.Bucket(bucketInvocations), ns+"/"+name+"/") })
}

// flushLoop persists pending records every interval until ctx ends, then once more.
func (iv *invocations) flushLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			iv.flush()
			return
		case <-t.C:
			iv.flush()
		}
	}
}

func (iv *invocations) flush() error {
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
			v, _ := json.Marshal(p.inv)
			k := fmt.Sprintf("%s/%s/%020d%06d", p.ns, p.name, p.inv.Time.UnixNano(), iv.seq%1_000_000)
			if err := b.Put([]byte(k), v); err != nil {
				return err
			}
			touched[p.ns+"/"+p.name+"/"] = true
		}
		// Keep the newest keepInvocations per function (keys sort by time).
		for prefix := range touched {
			var keys [][]byte
			c := b.Cursor()
			for k, _ := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, _ = c.Next() {
				keys = append(keys, append([]byte(nil), k...))
			}
			for i := 0; i < len(keys)-keepInvocations; i++ {
				if err := b.Delete(keys[i]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func deletePrefix(b *bolt.Bucket, prefix string) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
