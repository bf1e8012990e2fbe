package codestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) by Get for a missing key.
var ErrNotFound = errors.New("not found")

// Store keeps archives under keys made by Key.
type Store interface {
	// Put stores size bytes from r under key; a reader never sees half an object.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get returns ErrNotFound for a missing key.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Exists(ctx context.Context, key string) (bool, error)
	// DeletePrefix removes every object under prefix (which ends in "/").
	DeletePrefix(ctx context.Context, prefix string) error
	// Delete removes the object under key; a missing one is no error.
	Delete(ctx context.Context, key string) error
	// List returns the objects under prefix (which ends in "/"), in key order.
	List(ctx context.Context, prefix string) ([]Object, error)
}

// Object is one stored object as List sees it.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Key is where a function's archive is stored: code/{ns}/{name}/{sha256}.zip.
func Key(ns, name, sha256 string) string {
	return fmt.Sprintf("code/%s/%s/%s.zip", ns, name, sha256)
}

// Prefix holds every archive of one function.
func Prefix(ns, name string) string { return fmt.Sprintf("code/%s/%s/", ns, name) }
