package state

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
)

// bucketEgress holds each namespace's own egress rule (apiv1.EgressRule as JSON), by namespace.
var bucketEgress = []byte("egress")

// EgressChoices are the namespaces' own egress rules (PUT …/egress).
type EgressChoices struct{ db *bolt.DB }

// EgressChoices is the store of the namespaces' egress rules.
func (d *DB) EgressChoices() *EgressChoices { return &EgressChoices{db: d.db} }

// Get is ns's rule; nil when it chose none.
func (e *EgressChoices) Get(_ context.Context, ns string) (*apiv1.EgressRule, error) {
	var out *apiv1.EgressRule
	err := e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEgress)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(ns))
		if v == nil {
			return nil
		}
		out = &apiv1.EgressRule{}
		return json.Unmarshal(v, out)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the egress rule of %s: %w", ns, err)
	}
	return out, nil
}

// Set stores ns's rule.
func (e *EgressChoices) Set(_ context.Context, ns string, r apiv1.EgressRule) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return e.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketEgress)
		if err != nil {
			return err
		}
		return b.Put([]byte(ns), v)
	})
}

// All are every namespace's rule.
func (e *EgressChoices) All(_ context.Context) (map[string]apiv1.EgressRule, error) {
	out := map[string]apiv1.EgressRule{}
	err := e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEgress)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var r apiv1.EgressRule
			if err := json.Unmarshal(v, &r); err != nil {
				r = apiv1.EgressRule{Mode: apiv1.EgressNone} // unreadable: the narrowest rule
			}
			out[string(k)] = r
			return nil
		})
	})
	return out, err
}

// deleteEgress forgets ns's rule (its namespace is deleted).
func deleteEgress(tx *bolt.Tx, ns string) error {
	if b := tx.Bucket(bucketEgress); b != nil {
		return b.Delete([]byte(ns))
	}
	return nil
}
