package state

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/objects"
)

var bucketAsync = []byte("async")

// openAsync loads the asynchronous invocations the last run left (what was running is queued
// again) into a queue that writes each change to bbolt before it takes effect, in the
// transaction's fsync: a 202 means the event is on disk.
func openAsync(db *bolt.DB) (*async.MemQueue, error) {
	var evs []objects.AsyncEvent
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAsync).ForEach(func(k, v []byte) error {
			var ev objects.AsyncEvent
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("asynchronous invocation %s: %w", k, err)
			}
			evs = append(evs, ev)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("loading asynchronous invocations: %w", err)
	}
	q := async.NewMemQueue(func(put []objects.AsyncEvent, del []string) error {
		return db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketAsync)
			for _, id := range del {
				if err := b.Delete([]byte(id)); err != nil {
					return err
				}
			}
			for _, ev := range put {
				v, err := json.Marshal(ev)
				if err != nil {
					return err
				}
				if err := b.Put([]byte(ev.ID), v); err != nil {
					return err
				}
			}
			return nil
		})
	})
	q.Load(evs, time.Now())
	return q, nil
}
