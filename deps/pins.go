package deps

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var (
	// ErrMoved: the store's tag for a key names another layer than the one recorded when the key
	// was first stored. Someone who can write the store replaced it; the layer is not used.
	ErrMoved = errors.New("the dependency layer of this key was replaced in the store")
	// ErrEscapes: a stored layer has entries outside the dependency directory (it would overwrite
	// the runtime or the code in every image that mounts it).
	ErrEscapes = errors.New("the dependency layer has entries outside the dependency directory")
)

// Pins records the digest of the layer each key was first stored with, so that every later build
// mounts that layer and no other.
type Pins interface {
	// Pin returns the recorded digest of key ("" when none is).
	Pin(ctx context.Context, key string) (string, error)
	// SetPin records digest for key.
	SetPin(ctx context.Context, key, digest string) error
	// DropPin forgets key's digest (nothing recorded is not an error): its layer was deleted from
	// the store, and the next install of key records a new one instead of failing with ErrMoved.
	DropPin(ctx context.Context, key string) error
}

// Pinned checks a layer the store returned for key: against the recorded digest when there is
// one (ErrMoved when it differs); else, the first time the key is seen, its entries must lie under
// dir (ErrEscapes otherwise), and its digest is recorded.
func Pinned(ctx context.Context, pins Pins, key string, l v1.Layer, dir string) (v1.Layer, error) {
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	pinned, err := pins.Pin(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading the recorded digest of dependency layer %s: %w", short(key), err)
	}
	switch {
	case pinned == d.String():
		return l, nil
	case pinned != "":
		return nil, fmt.Errorf("%w: %s is recorded as %s but the store now has %s; remove the tag to install again", ErrMoved, short(key), pinned, d)
	}
	if err := CheckLayer(l, dir); err != nil {
		return nil, err
	}
	if err := pins.SetPin(ctx, key, d.String()); err != nil {
		return nil, fmt.Errorf("recording dependency layer %s: %w", short(key), err)
	}
	return l, nil
}

// CheckLayer reads l and refuses it if any entry lies outside dir (/app/deps, /app/node_modules):
// an entry elsewhere, a "..", anything but a directory for a parent of dir, or an entry below a
// symlink of the same layer (extraction would write where the link points).
func CheckLayer(l v1.Layer, dir string) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	prefix := strings.Trim(dir, "/")
	links := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading dependency layer: %w", err)
		}
		name := strings.Trim(strings.TrimPrefix(h.Name, "./"), "/")
		clean := path.Clean(name)
		escape := func(why string) error { return fmt.Errorf("%w: %q %s", ErrEscapes, h.Name, why) }
		switch {
		case slices.Contains(strings.Split(name, "/"), ".."):
			return escape("has a \"..\" element")
		case clean == prefix || strings.HasPrefix(clean, prefix+"/"):
			for p := path.Dir(clean); p != "." && p != "/"; p = path.Dir(p) {
				if links[p] {
					return escape("lies below the symlink " + p)
				}
			}
			if h.Typeflag == tar.TypeSymlink {
				links[clean] = true
			}
		case strings.HasPrefix(prefix, clean+"/") && h.Typeflag == tar.TypeDir:
			// an explicit parent directory of dir
		default:
			return escape("is outside " + dir)
		}
	}
}

func short(key string) string { return key[:min(12, len(key))] }

// MemPins is an in-memory Pins for unit tests.
type MemPins struct {
	mu sync.Mutex
	m  map[string]string
}

var _ Pins = (*MemPins)(nil)

// Pin returns the recorded digest.
func (p *MemPins) Pin(_ context.Context, key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[key], nil
}

// SetPin records digest.
func (p *MemPins) SetPin(_ context.Context, key, digest string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]string{}
	}
	p.m[key] = digest
	return nil
}

// DropPin forgets key's digest.
func (p *MemPins) DropPin(_ context.Context, key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, key)
	return nil
}
