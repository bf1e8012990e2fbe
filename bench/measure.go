package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/klauspost/compress/gzip"

	"github.com/sless-dev/sless/oci"
)

// series is one measured quantity.
type series struct {
	name string
	ds   []time.Duration
	err  error
}

func (s *series) median() time.Duration {
	d := slices.Clone(s.ds)
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	if len(d)%2 == 1 {
		return d[len(d)/2]
	}
	return (d[len(d)/2-1] + d[len(d)/2]) / 2
}

func (s *series) summary() string {
	lo, hi := slices.Min(s.ds), slices.Max(s.ds)
	return fmt.Sprintf("%s ms (%s–%s, n=%d)", ms(s.median()), ms(lo), ms(hi), len(s.ds))
}

func ms(d time.Duration) string {
	v := float64(d.Microseconds()) / 1000
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func ratio(a, b *series) float64 { return float64(a.median()) / float64(b.median()) }

type table struct{}

func (t *table) header() {
	fmt.Println("| build (one-line code change → pushed image) | median ms (min–max, n) | × floor |")
	fmt.Println("|---|---|---|")
}

func (t *table) row(label string, s, floor *series) {
	r := ""
	if floor != nil {
		r = fmt.Sprintf("%.2f×", ratio(s, floor))
	}
	fmt.Printf("| %s | %s | %s |\n", label, s.summary(), r)
}

func pushLayout(ctx context.Context, dir, ref string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) == 0 {
		return fmt.Errorf("%s holds no image", dir)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	return remote.Write(r, img, remote.WithContext(ctx))
}

// describeBase reads the base's layers once to report size and file count.
func describeBase(ctx context.Context, ref string) (string, error) {
	r, _ := name.ParseReference(ref)
	img, err := remote.Image(r, remote.WithContext(ctx))
	if err != nil {
		return "", err
	}
	ls, err := img.Layers()
	if err != nil {
		return "", err
	}
	var compressed, uncompressed, files int64
	for _, l := range ls {
		sz, _ := l.Size()
		compressed += sz
		rc, err := l.Uncompressed()
		if err != nil {
			return "", err
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return "", err
			}
			uncompressed += h.Size
			if h.Typeflag == tar.TypeReg {
				files++
			}
		}
		rc.Close()
	}
	return fmt.Sprintf("%d MB uncompressed in %d files, %d MB compressed, %d layer(s)", uncompressed/1e6, files, compressed/1e6, len(ls)), nil
}

// genCode writes about size bytes of Python-looking text in n files (deterministic).
func genCode(dir string, size int64, n int) (string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		return "", err
	}
	words := strings.Fields("def return self event data value result items index count name path query body headers status json load dump request response handler config cache error retry timeout")
	rng := rand.New(rand.NewPCG(1, 2))
	per := size / int64(n)
	for i := 0; i < n; i++ {
		var b strings.Builder
		for int64(b.Len()) < per {
			b.WriteString("    ")
			for j := 0; j < 8; j++ {
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "# %d\n", rng.IntN(1_000_000))
		}
		p := filepath.Join(dir, "lib", fmt.Sprintf("mod%03d.py", i))
		if err := os.WriteFile(p, []byte(b.String()[:per]), 0o644); err != nil {
			return "", err
		}
	}
	return dir, touch(dir, 0)
}

// touch is the one-line code change every measured build starts with.
func touch(dir string, i int) error {
	return os.WriteFile(filepath.Join(dir, "handler.py"),
		[]byte(fmt.Sprintf("def handle(event):\n    return {'build': %d}\n", i)), 0o644)
}

const warmups = 2

func inProcess(ctx context.Context, b *oci.Builder, base, dir, to string, n int) *series {
	s := &series{name: "in-process " + filepath.Base(dir)}
	for i := 0; i < n+warmups; i++ {
		if s.err = touch(dir, i+1000); s.err != nil {
			return s
		}
		start := time.Now()
		res, err := b.Build(ctx, oci.Source{RuntimeImage: base, Dir: os.DirFS(dir), Handler: "handler.handle"})
		if err != nil {
			s.err = err
			return s
		}
		_, err = b.Push(ctx, res, to)
		d := time.Since(start)
		res.Close()
		if err != nil {
			s.err = err
			return s
		}
		if i >= warmups {
			s.ds = append(s.ds, d)
		}
	}
	return s
}

func cli(ctx context.Context, bin, base, dir, to string, n int) *series {
	s := &series{name: "cli " + filepath.Base(dir)}
	for i := 0; i < n+1; i++ {
		if s.err = touch(dir, i+2000); s.err != nil {
			return s
		}
		start := time.Now()
		out, err := exec.CommandContext(ctx, bin, "build", "--quiet", "--runtime-image", base, "--src", dir, "--to", to).CombinedOutput()
		d := time.Since(start)
		if err != nil {
			s.err = fmt.Errorf("%v: %s", err, out)
			return s
		}
		if i >= 1 {
			s.ds = append(s.ds, d)
		}
	}
	return s
}

// floor is the least any builder must do for a code-only change: read and tar the code, gzip and
// sha256 it, then POST+PUT the layer, POST+PUT the config and PUT the manifest over one kept-alive
// connection. The base's layers are already in the target repository.
func floor(ctx context.Context, base, dir, repo string, n int) (*series, error) {
	s := &series{name: "floor " + filepath.Base(dir)}
	br, _ := name.ParseReference(base)
	img, err := remote.Image(br)
	if err != nil {
		return nil, err
	}
	to, _ := name.ParseReference(repo + ":base")
	if err := remote.Write(to, img); err != nil { // base layers into the repository, untimed
		return nil, err
	}
	baseCfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	baseMan, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	host := "http://" + to.Context().RegistryStr()
	path := to.Context().RepositoryStr()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	upload := func(body []byte, digest string) error {
		resp, err := client.Post(host+"/v2/"+path+"/blobs/uploads/", "", nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST upload: %s", resp.Status)
		}
		loc := resp.Header.Get("Location")
		if strings.HasPrefix(loc, "/") {
			loc = host + loc
		}
		sep := "?"
		if strings.Contains(loc, "?") {
			sep = "&"
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, loc+sep+"digest="+digest, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err = client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("PUT blob: %s", resp.Status)
		}
		return nil
	}
	for i := 0; i < n+warmups; i++ {
		if err := touch(dir, i+3000); err != nil {
			return nil, err
		}
		start := time.Now()
		var gz bytes.Buffer
		diffID, digest := sha256.New(), sha256.New()
		zw, _ := gzip.NewWriterLevel(io.MultiWriter(&gz, digest), gzip.BestSpeed)
		tw := tar.NewWriter(io.MultiWriter(diffID, zw))
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if err := tw.WriteHeader(&tar.Header{Name: "app/function/" + rel, Mode: 0o644, Size: int64(len(b))}); err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		})
		if err != nil {
			return nil, err
		}
		tw.Close()
		zw.Close()
		layerDigest := fmt.Sprintf("sha256:%x", digest.Sum(nil))
		cfg := baseCfg.DeepCopy()
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", diffID.Sum(nil))})
		cfgBytes, _ := json.Marshal(cfg)
		cfgDigest := fmt.Sprintf("sha256:%x", sha256.Sum256(cfgBytes))
		man := baseMan.DeepCopy()
		man.Config = v1.Descriptor{MediaType: man.Config.MediaType, Size: int64(len(cfgBytes)), Digest: v1.Hash{Algorithm: "sha256", Hex: cfgDigest[7:]}}
		man.Layers = append(man.Layers, v1.Descriptor{MediaType: man.Layers[0].MediaType, Size: int64(gz.Len()), Digest: v1.Hash{Algorithm: "sha256", Hex: layerDigest[7:]}})
		manBytes, _ := json.Marshal(man)
		if err := upload(gz.Bytes(), layerDigest); err != nil {
			return nil, err
		}
		if err := upload(cfgBytes, cfgDigest); err != nil {
			return nil, err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, host+"/v2/"+path+"/manifests/latest", bytes.NewReader(manBytes))
		req.Header.Set("Content-Type", string(man.MediaType))
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("PUT manifest: %s", resp.Status)
		}
		if i >= warmups {
			s.ds = append(s.ds, time.Since(start))
		}
	}
	return s, nil
}
