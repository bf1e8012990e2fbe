package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api"
	"github.com/sless-dev/sless/api/apiv1"
)

var (
	bucketNamespaces  = []byte("namespaces")
	bucketFunctions   = []byte("functions")
	bucketTriggers    = []byte("triggers")
	bucketJobs        = []byte("jobs")
	bucketBuilds      = []byte("builds")
	bucketInvocations = []byte("invocations")
)

func openDB(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2e9})
	if err != nil {
		return nil, fmt.Errorf("opening state %s (is another sless up using this data dir?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketNamespaces, bucketFunctions, bucketTriggers, bucketJobs, bucketBuilds, bucketInvocations} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func key(ns, name string) []byte { return []byte(ns + "/" + name) }

// boltStore is an api.Store of JSON records, keyed "ns/name", telling the controller after every
// committed change.
type boltStore[T any] struct {
	db     *bolt.DB
	bucket []byte
	name   func(T) string
	notify func(ns, name string)
}

var _ api.Store[apiv1.Function] = (*boltStore[apiv1.Function])(nil)

func (s *boltStore[T]) List(_ context.Context, ns string) ([]T, error) {
	out := []T{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(s.bucket).Cursor()
		prefix := []byte(ns + "/")
		for k, v := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, v = c.Next() {
			var t T
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("decoding %s: %w", k, err)
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// all lists every record of every namespace with its namespace.
func (s *boltStore[T]) all() (map[string][]T, error) {
	out := map[string][]T{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(s.bucket).ForEach(func(k, v []byte) error {
			ns, _, _ := strings.Cut(string(k), "/")
			var t T
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("decoding %s: %w", k, err)
			}
			out[ns] = append(out[ns], t)
			return nil
		})
	})
	return out, err
}

func (s *boltStore[T]) Get(_ context.Context, ns, name string) (T, error) {
	var t T
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(s.bucket).Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
		}
		return json.Unmarshal(v, &t)
	})
	return t, err
}

func (s *boltStore[T]) Create(_ context.Context, ns string, obj T) (T, error) {
	n := s.name(obj)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b.Get(key(ns, n)) != nil {
			return fmt.Errorf("%s/%s: %w", ns, n, api.ErrAlreadyExists)
		}
		v, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		return b.Put(key(ns, n), v)
	})
	if err != nil {
		var zero T
		return zero, err
	}
	s.changed(ns, n)
	return obj, nil
}

func (s *boltStore[T]) Update(_ context.Context, ns, name string, fn func(*T) error) (T, error) {
	var t T
	changed := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		v := b.Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
		}
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		if err := fn(&t); err != nil {
			return err
		}
		nv, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if string(nv) == string(v) {
			return nil // nothing changed: no write, no reconcile
		}
		changed = true
		return b.Put(key(ns, name), nv)
	})
	if err != nil {
		var zero T
		return zero, err
	}
	if changed {
		s.changed(ns, name)
	}
	return t, nil
}

func (s *boltStore[T]) Delete(_ context.Context, ns, name string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b.Get(key(ns, name)) == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, api.ErrNotFound)
		}
		return b.Delete(key(ns, name))
	})
	if err == nil {
		s.changed(ns, name)
	}
	return err
}

func (s *boltStore[T]) changed(ns, name string) {
	if s.notify != nil {
		s.notify(ns, name)
	}
}

// namespaces is the set of ensured namespaces.
type namespaces struct {
	db       *bolt.DB
	onDelete func(ns string) error
}

var _ api.Namespaces = (*namespaces)(nil)

func (n *namespaces) Ensure(_ context.Context, ns string) error {
	return n.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketNamespaces).Put([]byte(ns), []byte("{}")) })
}

func (n *namespaces) Exists(_ context.Context, ns string) (bool, error) {
	ok := false
	err := n.db.View(func(tx *bolt.Tx) error { ok = tx.Bucket(bucketNamespaces).Get([]byte(ns)) != nil; return nil })
	return ok, err
}

// Delete removes the namespace and its triggers and jobs (the API refuses while functions remain).
func (n *namespaces) Delete(_ context.Context, ns string) error {
	err := n.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketTriggers, bucketJobs} {
			c := tx.Bucket(b).Cursor()
			prefix := []byte(ns + "/")
			var keys [][]byte
			for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
				keys = append(keys, append([]byte(nil), k...))
			}
			for _, k := range keys {
				if err := tx.Bucket(b).Delete(k); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketNamespaces).Delete([]byte(ns))
	})
	if err == nil && n.onDelete != nil {
		return n.onDelete(ns)
	}
	return err
}

// buildState is what the controller knows about a function beyond its public status: what its
// current image was built from, and a build that failed (so it is not retried in a loop).
type buildState struct {
	CodeSHA256 string `json:"code_sha256,omitempty"`
	Runtime    string `json:"runtime,omitempty"`
	Entrypoint string `json:"entrypoint,omitempty"`
	RuntimeRef string `json:"runtime_ref,omitempty"`
	Image      string `json:"image,omitempty"`
	FailedKey  string `json:"failed_key,omitempty"`
	// Images lists every image pushed for the function, so delete can remove them all.
	Images []string `json:"images,omitempty"`
}

func (bs buildState) key() string {
	return bs.CodeSHA256 + "|" + bs.Runtime + "|" + bs.Entrypoint + "|" + bs.RuntimeRef
}

func getBuild(db *bolt.DB, ns, name string) (buildState, error) {
	var bs buildState
	err := db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBuilds).Get(key(ns, name))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &bs)
	})
	return bs, err
}

func putBuild(db *bolt.DB, ns, name string, bs buildState) error {
	v, err := json.Marshal(bs)
	if err != nil {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBuilds).Put(key(ns, name), v) })
}

func deleteBuild(db *bolt.DB, ns, name string) error {
	return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBuilds).Delete(key(ns, name)) })
}
