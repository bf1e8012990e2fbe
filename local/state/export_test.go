package state

import (
	"encoding/json"

	bolt "go.etcd.io/bbolt"
)

// SwapSealedForTest copies the sealed value of record from into record to.
func SwapSealedForTest(db *DB, from, to string) error {
	return db.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecrets)
		var f, t secretRecord
		if err := json.Unmarshal(b.Get([]byte(from)), &f); err != nil {
			return err
		}
		if err := json.Unmarshal(b.Get([]byte(to)), &t); err != nil {
			return err
		}
		t.Sealed = f.Sealed
		return put(b, []byte(to), t)
	})
}
