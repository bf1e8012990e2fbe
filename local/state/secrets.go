package state

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
)

// bucketSecrets holds each secret as a secretRecord, keyed "ns/name".
var bucketSecrets = []byte("secrets")

// KindSecret names a secret in change notifications: the functions that use it restart.
const KindSecret Kind = "secret"

// secretRecord is a secret at rest: what the API may tell in clear, and the values sealed with
// AES-256-GCM under the key file's key, the record's namespace, name and version as additional
// data (a sealed value moved to another record, or an older version put back, does not open).
type secretRecord struct {
	Keys      []string  `json:"keys"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	Sealed    []byte    `json:"sealed"` // nonce ‖ ciphertext of the JSON of the values
}

// Secrets is the single host's objects.Secrets: values encrypted in the state file, the key in a
// file of its own (0600), so that neither the state file nor a copy of it holds a value in clear.
type Secrets struct {
	db     *bolt.DB
	aead   cipher.AEAD
	notify func(ns, name string)
}

var _ objects.Secrets = (*Secrets)(nil)

// SecretKeySize is the size of the key file: an AES-256 key.
const SecretKeySize = 32

// LoadSecretKey reads the key at path, or makes one (random, mode 0600) when there is no file.
// A key file anyone but its owner may read, or of the wrong size, is refused: the values it
// opens would not be secret.
func LoadSecretKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		key := make([]byte, SecretKeySize)
		rand.Read(key)
		_, werr := f.Write(key)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("writing the secrets key %s: %w", path, err)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("making the secrets key %s: %w", path, err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the secrets key %s must be a regular file only its owner can read (mode 0600); it is %v", path, info.Mode())
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(key) != SecretKeySize {
		return nil, fmt.Errorf("the secrets key %s holds %d bytes; want %d", path, len(key), SecretKeySize)
	}
	return key, nil
}

// OpenSecrets gives the state's secrets, sealed with key (LoadSecretKey). Every Put and Delete
// is notified as KindSecret through Open's onChange.
func (s *DB) OpenSecrets(key []byte) (*Secrets, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Secrets{db: s.db, aead: aead, notify: s.notifySecret}, nil
}

func additional(ns, name string, version int64) []byte {
	return []byte(ns + "/" + name + "/" + strconv.FormatInt(version, 10))
}

func (r secretRecord) meta(name string) objects.SecretMeta {
	return objects.SecretMeta{Name: name, Keys: r.Keys, Version: r.Version, UpdatedAt: r.UpdatedAt}
}

// List returns ns's secrets sorted by name.
func (s *Secrets) List(_ context.Context, ns string) ([]objects.SecretMeta, error) {
	out := []objects.SecretMeta{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSecrets).Cursor()
		prefix := ns + "/"
		for k, v := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			var r secretRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decoding secret %s: %w", k, err)
			}
			out = append(out, r.meta(strings.TrimPrefix(string(k), prefix)))
		}
		return nil
	})
	return out, err
}

func (s *Secrets) record(tx *bolt.Tx, ns, name string) (secretRecord, bool, error) {
	var r secretRecord
	v := tx.Bucket(bucketSecrets).Get(key(ns, name))
	if v == nil {
		return r, false, nil
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("decoding secret %s/%s: %w", ns, name, err)
	}
	return r, true, nil
}

// Get returns one secret's description or objects.ErrNotFound.
func (s *Secrets) Get(_ context.Context, ns, name string) (objects.SecretMeta, error) {
	var m objects.SecretMeta
	err := s.db.View(func(tx *bolt.Tx) error {
		r, ok, err := s.record(tx, ns, name)
		if err == nil && !ok {
			err = fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
		}
		m = r.meta(name)
		return err
	})
	return m, err
}

// Put seals data as the secret's next version.
func (s *Secrets) Put(_ context.Context, ns, name string, data map[string]string) (objects.SecretMeta, bool, error) {
	if err := apiv1.ValidSecretData(data); err != nil {
		return objects.SecretMeta{}, false, err
	}
	plain, err := json.Marshal(data)
	if err != nil {
		return objects.SecretMeta{}, false, err
	}
	defer clear(plain)
	var r secretRecord
	created := false
	err = s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketNamespaces).Get([]byte(ns)) == nil {
			return fmt.Errorf("namespace %s: %w", ns, objects.ErrNotFound)
		}
		old, ok, err := s.record(tx, ns, name)
		if err != nil {
			return err
		}
		if created = !ok; created && count(tx.Bucket(bucketSecrets), ns) >= apiv1.MaxSecrets {
			return objects.TooManySecrets(ns)
		}
		r = secretRecord{Keys: slices.Sorted(maps.Keys(data)), Version: old.Version + 1, UpdatedAt: time.Now().UTC()}
		nonce := make([]byte, s.aead.NonceSize())
		rand.Read(nonce)
		r.Sealed = s.aead.Seal(nonce, nonce, plain, additional(ns, name, r.Version))
		return put(tx.Bucket(bucketSecrets), key(ns, name), r)
	})
	if err != nil {
		return objects.SecretMeta{}, false, err
	}
	s.notify(ns, name)
	return r.meta(name), created, nil
}

// Delete removes a secret or returns objects.ErrNotFound.
func (s *Secrets) Delete(_ context.Context, ns, name string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSecrets)
		if b.Get(key(ns, name)) == nil {
			return fmt.Errorf("secret %s/%s: %w", ns, name, objects.ErrNotFound)
		}
		return b.Delete(key(ns, name))
	})
	if err == nil {
		s.notify(ns, name)
	}
	return err
}

// Values opens a secret: what the controller hands to a container. ok is false when there is no
// such secret.
func (s *Secrets) Values(ns, name string) (data map[string]string, m objects.SecretMeta, ok bool, err error) {
	var r secretRecord
	err = s.db.View(func(tx *bolt.Tx) error {
		r, ok, err = s.record(tx, ns, name)
		return err
	})
	if err != nil || !ok {
		return nil, objects.SecretMeta{}, ok, err
	}
	n := s.aead.NonceSize()
	if len(r.Sealed) < n {
		return nil, objects.SecretMeta{}, false, fmt.Errorf("secret %s/%s: the sealed value is cut short", ns, name)
	}
	plain, err := s.aead.Open(nil, r.Sealed[:n], r.Sealed[n:], additional(ns, name, r.Version))
	if err != nil {
		return nil, objects.SecretMeta{}, false, fmt.Errorf("secret %s/%s does not open with this data dir's secrets key (was the key file replaced?)", ns, name)
	}
	defer clear(plain)
	if err := json.Unmarshal(plain, &data); err != nil {
		return nil, objects.SecretMeta{}, false, fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return data, r.meta(name), true, nil
}
