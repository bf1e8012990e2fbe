package deps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"

	"github.com/sless-dev/sless/layers"
)

// ErrNotFound is what a Store returns for a key it does not hold.
var ErrNotFound = errors.New("no cached layer for this key")

// Store keeps dependency layers by key. Implementations: RegistryStore, MemStore.
type Store interface {
	Get(ctx context.Context, key string) (v1.Layer, error)
	Put(ctx context.Context, key string, l v1.Layer) (v1.Layer, error)
}

// Resolver runs an Installer with the manifests in inDir (mounted at /in) and writes the result to
// outDir (mounted at /out). Implementations: the single host's podman runner (local/); Kubernetes
// runs the same argv in a Job (operator/).
type Resolver interface {
	Resolve(ctx context.Context, s Spec, in Installer, inDir, outDir string) error
}

// RegistryStore keeps each layer as a one-layer image LayerRef(prefix, key): one repository per
// key, so a push credential can be scoped to a single key (regauth.DepsPush).
type RegistryStore struct {
	prefix string
	opts   []remote.Option
}

var _ Store = (*RegistryStore)(nil)

// LayerRef is where key's layer is stored below prefix ("<registry>/sless/deps").
func LayerRef(prefix, key string) string { return prefix + "/" + key + ":latest" }

// NewRegistryStore stores below prefix (e.g. "127.0.0.1:5000/sless/deps").
func NewRegistryStore(prefix string, opts ...remote.Option) (*RegistryStore, error) {
	if _, err := name.NewRepository(prefix); err != nil {
		return nil, fmt.Errorf("deps store repository %q: %w", prefix, err)
	}
	return &RegistryStore{prefix: prefix, opts: opts}, nil
}

func (s *RegistryStore) ref(key string) (name.Reference, error) {
	return name.ParseReference(LayerRef(s.prefix, key))
}

// Get returns the stored layer (a remote layer: pushing an image that holds it mounts it).
func (s *RegistryStore) Get(ctx context.Context, key string) (v1.Layer, error) {
	ref, err := s.ref(key)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(ref, append(s.opts, remote.WithContext(ctx))...)
	if err != nil {
		if isNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	ls, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(ls) != 1 {
		return nil, fmt.Errorf("deps image %s has %d layers, want 1", ref, len(ls))
	}
	return ls[0], nil
}

// Put pushes l as LayerRef(prefix, key) and returns the stored copy.
func (s *RegistryStore) Put(ctx context.Context, key string, l v1.Layer) (v1.Layer, error) {
	ref, err := s.ref(key)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l)
	if err != nil {
		return nil, err
	}
	if err := remote.Write(ref, img, append(s.opts, remote.WithContext(ctx))...); err != nil {
		return nil, fmt.Errorf("pushing deps layer %s: %w", key, err)
	}
	return s.Get(ctx, key)
}

// MemStore is an in-memory Store for unit tests.
type MemStore struct {
	mu sync.Mutex
	m  map[string]v1.Layer
}

// Get returns a stored layer or ErrNotFound.
func (s *MemStore) Get(_ context.Context, key string) (v1.Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.m[key]; ok {
		return l, nil
	}
	return nil, ErrNotFound
}

// Put stores l.
func (s *MemStore) Put(_ context.Context, key string, l v1.Layer) (v1.Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]v1.Layer{}
	}
	s.m[key] = l
	return l, nil
}

// Result is what Cache.Layer found or made.
type Result struct {
	Layer   v1.Layer
	Key     string
	Cached  bool   // true when no installer ran
	Warning string // e.g. npm without a lockfile
}

// Cache gets a Spec's layer from the Store or, on a miss, resolves it once (concurrent requests
// for one key share the install) and stores it. A failed install caches nothing.
type Cache struct {
	store    Store
	resolver Resolver
	pins     Pins
	tempDir  string
	flight   singleflight.Group
}

// NewCache makes a Cache. pins records each key's layer (Pinned); tempDir holds the install's
// in/out dirs ("" for os.TempDir()).
func NewCache(store Store, resolver Resolver, pins Pins, tempDir string) *Cache {
	return &Cache{store: store, resolver: resolver, pins: pins, tempDir: tempDir}
}

// Layer returns the dependency layer for s, placed under dir (/app/deps, /app/node_modules).
func (c *Cache) Layer(ctx context.Context, s Spec, dir string) (Result, error) {
	in, err := s.Installer()
	if err != nil {
		return Result{}, err
	}
	key, err := Key(s)
	if err != nil {
		return Result{}, err
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		if l, err := c.store.Get(ctx, key); err == nil {
			if l, err = Pinned(ctx, c.pins, key, l, dir); err != nil {
				return nil, err
			}
			return Result{Layer: l, Key: key, Cached: true, Warning: in.Warning}, nil
		} else if !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("reading the deps cache: %w", err)
		}
		if s.Installing != nil {
			s.Installing()
		}
		l, err := c.resolve(ctx, s, in, dir)
		if err != nil {
			return nil, err
		}
		stored, err := c.store.Put(ctx, key, l)
		if err != nil {
			return nil, err
		}
		// This install made the layer: it is what the key stands for from now on (also after the
		// tag was lost and the key installed again).
		d, err := stored.Digest()
		if err == nil {
			err = c.pins.SetPin(ctx, key, d.String())
		}
		if err != nil {
			return nil, fmt.Errorf("recording dependency layer %s: %w", short(key), err)
		}
		return Result{Layer: stored, Key: key, Warning: in.Warning}, nil
	})
	if err != nil {
		return Result{}, err
	}
	return v.(Result), nil
}

func (c *Cache) resolve(ctx context.Context, s Spec, in Installer, dir string) (v1.Layer, error) {
	work, err := os.MkdirTemp(c.tempDir, "sless-deps-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	inDir, outDir := filepath.Join(work, "in"), filepath.Join(work, "out")
	for _, d := range []string{inDir, outDir, filepath.Join(work, "work")} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, err
		}
	}
	for n, b := range s.Files {
		if err := os.WriteFile(filepath.Join(inDir, n), b, 0o644); err != nil {
			return nil, err
		}
	}
	if err := c.resolver.Resolve(ctx, s, in, inDir, outDir); err != nil {
		return nil, err
	}
	return LayerFromDir(outDir, dir)
}

// LayerFromDir makes the deterministic dependency layer of an installed directory (what `sless
// deps push` does in a Kubernetes deps Job).
func LayerFromDir(src, dir string) (*layers.Layer, error) {
	// Installed trees can be large; the code limits do not apply.
	return layers.FromFS(os.DirFS(src), layers.WithPrefix(dir), layers.WithSymlinks(),
		layers.WithMaxEntries(1_000_000), layers.WithMaxBytes(8<<30))
}
