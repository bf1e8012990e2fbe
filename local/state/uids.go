package state

import (
	"encoding/binary"
	"errors"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// UIDRangeStart is the first host uid of tenants' ranges: above the ranges /etc/subuid hands out
// (100000 + 65536·n) for a long way.
const UIDRangeStart = 1 << 24

// UIDRangeSize is one tenant's range: a whole container uid space.
const UIDRangeSize = 65536

// UIDBase is namespace ns's range of host uids and gids (container id 0 is host id UIDBase),
// allocated on first use: the lowest range given back (ReleaseUIDRange), else a new one. A range is
// never another namespace's while it is ns's.
func (s *DB) UIDBase(ns string) (uint32, error) {
	base, ok, err := s.UIDRangeOf(ns)
	if err != nil || ok {
		return base, err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUIDRanges)
		if v := b.Get([]byte(ns)); v != nil { // allocated meanwhile
			n, err := strconv.ParseUint(string(v), 10, 32)
			base = uint32(n)
			return err
		}
		free := tx.Bucket(bucketUIDFree)
		if k, _ := free.Cursor().First(); k != nil {
			base = binary.BigEndian.Uint32(k)
			if err := free.Delete(k); err != nil {
				return err
			}
		} else {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			next := uint64(UIDRangeStart) + (seq-1)*UIDRangeSize
			if next+UIDRangeSize > 1<<32-2 {
				return errors.New("no uid range left for another namespace")
			}
			base = uint32(next)
		}
		return b.Put([]byte(ns), []byte(strconv.FormatUint(uint64(base), 10)))
	})
	return base, err
}

// UIDRangeOf is ns's range, if it has one.
func (s *DB) UIDRangeOf(ns string) (base uint32, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketUIDRanges).Get([]byte(ns))
		if v == nil {
			return nil
		}
		n, err := strconv.ParseUint(string(v), 10, 32)
		base, ok = uint32(n), err == nil
		return err
	})
	return base, ok, err
}

// DeletedUIDRanges are the ranges still recorded for namespaces that are gone (no namespace, no
// function): ReleaseUIDRange's candidates, once no container uses them.
func (s *DB) DeletedUIDRanges() (map[string]uint32, error) {
	out := map[string]uint32{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUIDRanges).ForEach(func(k, v []byte) error {
			if !gone(tx, string(k)) {
				return nil
			}
			n, err := strconv.ParseUint(string(v), 10, 32)
			out[string(k)] = uint32(n)
			return err
		})
	})
	return out, err
}

// ReleaseUIDRange gives ns's range back for another namespace, if ns is still gone (it reports
// false when ns was ensured again or holds a function meanwhile, or has no range). The caller
// makes sure no container of ns is left, running or stopped, nor being created: the range's next
// holder must share no uid with anything of ns.
func (s *DB) ReleaseUIDRange(ns string) (released bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUIDRanges)
		v := b.Get([]byte(ns))
		if v == nil || !gone(tx, ns) {
			return nil
		}
		n, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return err
		}
		var k [4]byte
		binary.BigEndian.PutUint32(k[:], uint32(n))
		if err := tx.Bucket(bucketUIDFree).Put(k[:], []byte{}); err != nil {
			return err
		}
		released = true
		return b.Delete([]byte(ns))
	})
	return released, err
}

// gone reports whether namespace ns is neither ensured nor holds a function.
func gone(tx *bolt.Tx, ns string) bool {
	return tx.Bucket(bucketNamespaces).Get([]byte(ns)) == nil && count(tx.Bucket(bucketFunctions), ns) == 0
}
