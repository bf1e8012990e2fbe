package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "mkbase:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var env, labels list
	rootfs := flag.String("rootfs", "", "root filesystem directory")
	out := flag.String("o", "", "output OCI image layout directory (replaced)")
	cmd := flag.String("cmd", "", "Cmd as a JSON array")
	entrypoint := flag.String("entrypoint", "", "Entrypoint (one path)")
	workdir := flag.String("workdir", "", "WorkingDir")
	desc := flag.String("desc", "root filesystem", "what the layer is, for the history entry")
	flag.Var(&env, "env", "KEY=VALUE (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE (repeatable)")
	flag.Parse()
	if *rootfs == "" || *out == "" {
		return fmt.Errorf("usage: mkbase -rootfs DIR -o LAYOUT [-env K=V] [-cmd JSON] [-entrypoint PATH]")
	}
	tmp, err := os.MkdirTemp(filepath.Dir(*out), ".mkbase-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tarPath := filepath.Join(tmp, "rootfs.tar")
	// Contents of /dev, /proc and /sys belong to the runtime, not the image.
	tc := exec.CommandContext(ctx, "tar", "--sort=name", "--numeric-owner", "--xattrs",
		"--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
		"-C", *rootfs, "-cf", tarPath, ".")
	tc.Stderr = os.Stderr
	if err := tc.Run(); err != nil {
		return fmt.Errorf("tar of %s: %w", *rootfs, err)
	}
	layer, err := tarball.LayerFromFile(tarPath, tarball.WithCompressionLevel(1), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Env = env
	cf.Config.WorkingDir = *workdir
	if *cmd != "" {
		if err := json.Unmarshal([]byte(*cmd), &cf.Config.Cmd); err != nil {
			return fmt.Errorf("-cmd must be a JSON array: %w", err)
		}
	}
	if *entrypoint != "" {
		cf.Config.Entrypoint = []string{*entrypoint}
	}
	if len(labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			cf.Config.Labels[k] = v
		}
	}
	cf.History = []v1.History{{Created: cf.Created, CreatedBy: "mkbase: " + *desc}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	lp, err := layout.Write(filepath.Join(tmp, "layout"), empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	return os.Rename(filepath.Join(tmp, "layout"), *out)
}
