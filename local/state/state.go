package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/async"
	"github.com/sless-dev/sless/lifecycle"
	"github.com/sless-dev/sless/objects"
)

var (
	bucketMeta        = []byte("meta")
	bucketNamespaces  = []byte("namespaces")
	bucketFunctions   = []byte("functions")
	bucketTriggers    = []byte("triggers")
	bucketJobs        = []byte("jobs")
	bucketBuilds      = []byte("builds")
	bucketInvocations = []byte("invocations")
	bucketDepsPins    = []byte("deps_pins")
	bucketUIDRanges   = []byte("uid_ranges")
	// bucketUIDFree holds the ranges given back (ReleaseUIDRange), by base, big-endian: lowest first.
	bucketUIDFree = []byte("uid_free")
)

// schemaVersion 2 keeps spec and status apart (version 1, before it, had no meta bucket).
const schemaVersion = "2"

// Kind names a kind of object in change notifications.
type Kind string

// Kinds.
const (
	KindFunction Kind = "function"
	KindTrigger  Kind = "trigger"
	KindJob      Kind = "job"
)

// DB is the state file.
type DB struct {
	db        *bolt.DB
	Functions *Store[objects.FunctionSpec, lifecycle.FunctionStatus]
	Triggers  *Store[objects.TriggerSpec, apiv1.TriggerStatus]
	Jobs      *Store[objects.JobSpec, apiv1.JobStatus]
	// Namespaces is the set of ensured namespaces.
	Namespaces *Namespaces
	// Invocations keeps the invocation records.
	Invocations *Invocations
	// Async keeps asynchronous invocations (in memory, each change written through).
	Async *async.MemQueue
	// notifySecret tells onChange of a secret's change (OpenSecrets).
	notifySecret func(ns, name string)
}

// Open opens (or creates) the state file at path and migrates an earlier schema. onChange, when
// set, is told after every committed spec change (create, update that changed it, delete): the
// controller's cue to reconcile. Status writes do not notify: the controller made them.
func Open(path string, onChange func(k Kind, ns, name string)) (*DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening state %s (is another sless up using this data dir?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketNamespaces, bucketFunctions, bucketTriggers, bucketJobs, bucketBuilds, bucketInvocations, bucketDepsPins, bucketUIDRanges, bucketUIDFree, bucketSecrets, bucketAsync} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return migrate(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening state %s: %w", path, err)
	}
	notify := func(k Kind) func(ns, name string) {
		return func(ns, name string) {
			if onChange != nil {
				onChange(k, ns, name)
			}
		}
	}
	s := &DB{db: db,
		Functions: &Store[objects.FunctionSpec, lifecycle.FunctionStatus]{db: db, bucket: bucketFunctions, name: func(f objects.FunctionSpec) string { return f.Name }, notify: notify(KindFunction)},
		Triggers:  &Store[objects.TriggerSpec, apiv1.TriggerStatus]{db: db, bucket: bucketTriggers, name: func(t objects.TriggerSpec) string { return t.Name }, notify: notify(KindTrigger)},
		Jobs:      &Store[objects.JobSpec, apiv1.JobStatus]{db: db, bucket: bucketJobs, name: func(j objects.JobSpec) string { return j.Name }, notify: notify(KindJob)},
	}
	s.notifySecret = notify(KindSecret)
	s.Functions.max, s.Functions.over = &atomic.Int64{}, functionsOverQuota
	s.Namespaces = &Namespaces{db: db}
	if s.Invocations, err = loadInvocations(db); err != nil {
		db.Close()
		return nil, err
	}
	if s.Async, err = openAsync(db); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the file (after a last flush of invocation records).
func (s *DB) Close() error {
	return errors.Join(s.Invocations.Flush(), s.db.Close())
}

func key(ns, name string) []byte { return []byte(ns + "/" + name) }

// record is how an object is kept: the API's spec and generation, the controller's status and the
// generation it describes.
type record[S, St any] struct {
	Spec               S     `json:"spec"`
	Generation         int64 `json:"generation"`
	Status             St    `json:"status"`
	ObservedGeneration int64 `json:"observed_generation,omitempty"`
}

func (r record[S, St]) object() objects.Object[S, St] {
	return objects.Object[S, St]{Spec: r.Spec, Status: r.Status, Generation: r.Generation, ObservedGeneration: r.ObservedGeneration}
}

// Store is an objects.Store of one kind, keyed "ns/name", and the controller's status writer.
type Store[S, St any] struct {
	db     *bolt.DB
	bucket []byte
	name   func(S) string
	notify func(ns, name string)
	// max caps the objects of one namespace (nil or 0: no cap); over says so when a create would
	// pass it.
	max  *atomic.Int64
	over func(ns string, n int64) error
}

// SetMaxFunctions caps the functions one namespace may hold (0: no cap). Create checks it in the
// transaction that stores the function, so concurrent creates cannot pass it together.
func (s *DB) SetMaxFunctions(n int) { s.Functions.max.Store(int64(n)) }

func functionsOverQuota(ns string, n int64) error {
	return fmt.Errorf("%w: namespace %s has %d functions, the most its quota allows (the platform's --tenant-quota-functions); delete one first",
		objects.ErrQuotaExceeded, ns, n)
}

// count is the number of objects of namespace ns in b.
func count(b *bolt.Bucket, ns string) int64 {
	var n int64
	prefix := []byte(ns + "/")
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Next() {
		n++
	}
	return n
}

var _ objects.Store[objects.FunctionSpec, lifecycle.FunctionStatus] = (*Store[objects.FunctionSpec, lifecycle.FunctionStatus])(nil)

func decode[S, St any](k, v []byte) (record[S, St], error) {
	var r record[S, St]
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", k, err)
	}
	return r, nil
}

// List returns the namespace's objects sorted by name.
func (s *Store[S, St]) List(_ context.Context, ns string) ([]objects.Object[S, St], error) {
	out := []objects.Object[S, St]{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(s.bucket).Cursor()
		prefix := []byte(ns + "/")
		for k, v := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, v = c.Next() {
			r, err := decode[S, St](k, v)
			if err != nil {
				return err
			}
			out = append(out, r.object())
		}
		return nil
	})
	return out, err
}

// All lists every object of every namespace, by namespace.
func (s *Store[S, St]) All() (map[string][]objects.Object[S, St], error) {
	out := map[string][]objects.Object[S, St]{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(s.bucket).ForEach(func(k, v []byte) error {
			ns, _, _ := strings.Cut(string(k), "/")
			r, err := decode[S, St](k, v)
			if err != nil {
				return err
			}
			out[ns] = append(out[ns], r.object())
			return nil
		})
	})
	return out, err
}

// Get returns the object or objects.ErrNotFound.
func (s *Store[S, St]) Get(_ context.Context, ns, name string) (objects.Object[S, St], error) {
	var r record[S, St]
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(s.bucket).Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
		}
		var err error
		r, err = decode[S, St](key(ns, name), v)
		return err
	})
	return r.object(), err
}

// Create stores a new object at generation 1, or returns objects.ErrAlreadyExists.
func (s *Store[S, St]) Create(_ context.Context, ns string, spec S) (objects.Object[S, St], error) {
	n := s.name(spec)
	r := record[S, St]{Spec: spec, Generation: 1}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b.Get(key(ns, n)) != nil {
			return fmt.Errorf("%s/%s: %w", ns, n, objects.ErrAlreadyExists)
		}
		// Checked with the put, in one transaction: a namespace deleted since the API looked
		// must not get an object it would never clean up.
		if tx.Bucket(bucketNamespaces).Get([]byte(ns)) == nil {
			return fmt.Errorf("namespace %s: %w", ns, objects.ErrNotFound)
		}
		if s.max != nil {
			if limit := s.max.Load(); limit > 0 {
				if have := count(b, ns); have >= limit {
					return s.over(ns, have)
				}
			}
		}
		return put(b, key(ns, n), r)
	})
	if err != nil {
		return objects.Object[S, St]{}, err
	}
	s.changed(ns, n)
	return r.object(), nil
}

func put(b *bolt.Bucket, k []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(k, raw)
}

// Update applies fn to the spec; when the spec changed, the generation moves and the change is
// notified.
func (s *Store[S, St]) Update(_ context.Context, ns, name string, fn func(*S) error) (objects.Object[S, St], error) {
	var r record[S, St]
	changed := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		v := b.Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
		}
		var err error
		if r, err = decode[S, St](key(ns, name), v); err != nil {
			return err
		}
		before, err := json.Marshal(r.Spec)
		if err != nil {
			return err
		}
		if err := fn(&r.Spec); err != nil {
			return err
		}
		after, err := json.Marshal(r.Spec)
		if err != nil {
			return err
		}
		if string(before) == string(after) {
			return nil // nothing changed: no new generation, no reconcile
		}
		changed = true
		r.Generation++
		return put(b, key(ns, name), r)
	})
	if err != nil {
		return objects.Object[S, St]{}, err
	}
	if changed {
		s.changed(ns, name)
	}
	return r.object(), nil
}

// UpdateStatus is the controller's write: fn gets the status, and observed (the generation the
// controller acted on) becomes the observed generation. A spec that moved on meanwhile keeps its
// newer generation, so the object still shows Pending: no guard is needed against a stale write.
// It returns objects.ErrNotFound for a deleted object and writes nothing when nothing changed.
func (s *Store[S, St]) UpdateStatus(ns, name string, observed int64, fn func(*St)) error {
	// Most calls change nothing (the autoscaler writes its counts every tick): a read transaction
	// finds out without the write transaction's fsync, which waits for the disk.
	unchanged := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(s.bucket).Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
		}
		r, err := decode[S, St](key(ns, name), v)
		if err != nil {
			return err
		}
		before, _ := decode[S, St](key(ns, name), v) // a copy that shares no pointer with r
		fn(&r.Status)
		r.ObservedGeneration = max(r.ObservedGeneration, observed)
		unchanged = reflect.DeepEqual(before, r)
		return nil
	})
	if err != nil || unchanged {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		v := b.Get(key(ns, name))
		if v == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
		}
		r, err := decode[S, St](key(ns, name), v)
		if err != nil {
			return err
		}
		// Decoded apart: fn may change what the status's slices and maps hold in place (a
		// condition), which a copy of r would share.
		before, err := decode[S, St](key(ns, name), v)
		if err != nil {
			return err
		}
		fn(&r.Status)
		r.ObservedGeneration = max(r.ObservedGeneration, observed)
		if reflect.DeepEqual(before, r) {
			return nil
		}
		return put(b, key(ns, name), r)
	})
}

// Delete removes the object or returns objects.ErrNotFound.
func (s *Store[S, St]) Delete(_ context.Context, ns, name string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b.Get(key(ns, name)) == nil {
			return fmt.Errorf("%s/%s: %w", ns, name, objects.ErrNotFound)
		}
		return b.Delete(key(ns, name))
	})
	if err == nil {
		s.changed(ns, name)
	}
	return err
}

func (s *Store[S, St]) changed(ns, name string) {
	if s.notify != nil {
		s.notify(ns, name)
	}
}

// Namespaces is the set of ensured namespaces.
type Namespaces struct {
	db *bolt.DB
}

var _ objects.Namespaces = (*Namespaces)(nil)

// Ensure records ns.
func (n *Namespaces) Ensure(_ context.Context, ns string) error {
	return n.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketNamespaces).Put([]byte(ns), []byte("{}")) })
}

// Exists reports whether ns was ensured.
func (n *Namespaces) Exists(_ context.Context, ns string) (bool, error) {
	ok := false
	err := n.db.View(func(tx *bolt.Tx) error { ok = tx.Bucket(bucketNamespaces).Get([]byte(ns)) != nil; return nil })
	return ok, err
}

// Delete removes the namespace and its triggers, jobs and secrets. It refuses (objects.ErrConflict) while
// functions remain, checked in the same transaction, so a function created meanwhile is never
// left in a namespace that is gone.
func (n *Namespaces) Delete(_ context.Context, ns string) error {
	return n.db.Update(func(tx *bolt.Tx) error {
		if have := count(tx.Bucket(bucketFunctions), ns); have > 0 {
			return fmt.Errorf("%w: namespace %q still has %d function(s); delete them first", objects.ErrConflict, ns, have)
		}
		for _, b := range [][]byte{bucketTriggers, bucketJobs, bucketSecrets} {
			if err := deletePrefix(tx.Bucket(b), ns+"/"); err != nil {
				return err
			}
		}
		if err := deleteEgress(tx, ns); err != nil {
			return err
		}
		return tx.Bucket(bucketNamespaces).Delete([]byte(ns))
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

// Build is what the controller keeps about a function's builds beyond its status.
type Build struct {
	// Key is the identity (build.Key) of the build Image came from.
	Key   string `json:"key,omitempty"`
	Image string `json:"image,omitempty"`
	// FailedKey is a build that failed through the function's own fault: not retried until the
	// key changes.
	FailedKey string `json:"failed_key,omitempty"`
	// Images lists every image pushed for the function, so its deletion removes them all.
	Images []string `json:"images,omitempty"`
	// Started is the version (runner.ContainerName: image and run configuration) that last passed
	// its health check: it serves from zero instances on demand, while a new one must first start
	// one instance that answers.
	Started string `json:"started,omitempty"`
	// Legacy and LegacyFailed are the build identities of an earlier sless up
	// ("code|runtime|entrypoint|runtime image"), kept by the migration until the controller has
	// matched them to a Key (so an upgrade rebuilds nothing).
	Legacy       string `json:"legacy,omitempty"`
	LegacyFailed string `json:"legacy_failed,omitempty"`
}

// Build returns what is kept about ns/name's builds (the zero Build when nothing is).
func (s *DB) Build(ns, name string) (Build, error) {
	var b Build
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBuilds).Get(key(ns, name))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &b)
	})
	return b, err
}

// PutBuild replaces what is kept about ns/name's builds.
func (s *DB) PutBuild(ns, name string, b Build) error {
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketBuilds), key(ns, name), b) })
}

// DeleteBuild forgets ns/name's builds.
func (s *DB) DeleteBuild(ns, name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBuilds).Delete(key(ns, name)) })
}

// Pin is the digest recorded for a dependency layer key ("" when none is): deps.Pins.
func (s *DB) Pin(_ context.Context, key string) (string, error) {
	var d string
	err := s.db.View(func(tx *bolt.Tx) error { d = string(tx.Bucket(bucketDepsPins).Get([]byte(key))); return nil })
	return d, err
}

// SetPin records the digest of a dependency layer key.
func (s *DB) SetPin(_ context.Context, key, digest string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketDepsPins).Put([]byte(key), []byte(digest)) })
}

// DropPin forgets the digest of a dependency layer key whose layer was deleted from the registry.
func (s *DB) DropPin(_ context.Context, key string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketDepsPins).Delete([]byte(key)) })
}
