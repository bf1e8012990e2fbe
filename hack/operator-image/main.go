package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sless-dev/sless/layers"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "operator-image:", err)
		os.Exit(1)
	}
}

// uid is the non-root user the install manifest runs the operator as.
const uid = 65532

func run(ctx context.Context) error {
	to := flag.String("to", "", "REPO:TAG to push to (required)")
	insecure := flag.Bool("insecure", false, "plain HTTP registry")
	flag.Parse()
	if *to == "" {
		return fmt.Errorf("--to is required")
	}
	var nopts []name.Option
	if *insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.NewTag(*to, nopts...)
	if err != nil {
		return err
	}
	start := time.Now()
	stage, err := os.MkdirTemp("", "sless-operator-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	// Two trees, each a layer under its own prefix (the layers package never writes at /).
	bin, etc := filepath.Join(stage, "bin"), filepath.Join(stage, "etc")
	for _, c := range []struct{ out, pkg string }{{"sless-operator", "./cmd/sless-operator"}, {"sless", "./cmd/sless"}} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(bin, c.out), c.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", c.pkg, err)
		}
	}
	compiled := time.Since(start)
	files := map[string]string{
		"passwd":        fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/tmp:/sbin/nologin\n", uid, uid),
		"group":         fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid),
		"nsswitch.conf": "hosts: files dns\n",
	}
	// TLS to a registry or S3 endpoint with a public certificate needs the CA bundle.
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["ssl/certs/ca-certificates.crt"] = string(ca)
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Join(etc, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(etc, p), []byte(body), 0o644); err != nil {
			return err
		}
	}
	var img v1.Image = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	nfiles := 0
	for _, tree := range []struct{ dir, prefix string }{{bin, "/usr/local/bin"}, {etc, "/etc"}} {
		l, err := layers.FromFS(os.DirFS(tree.dir), layers.WithPrefix(tree.prefix), layers.WithMaxBytes(1<<30))
		if err != nil {
			return err
		}
		defer l.Close()
		nfiles += l.Files()
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	img, err = mutate.Config(img, v1.Config{
		Entrypoint: []string{"/usr/local/bin/sless-operator"},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		// /tmp is the one writable directory (an emptyDir under a read-only root filesystem).
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"},
		WorkingDir: "/tmp",
		Labels:     map[string]string{"org.opencontainers.image.title": "sless-operator", "org.opencontainers.image.source": "https://github.com/sless-dev/sless"},
	})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	pushStart := time.Now()
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "operator-image: compiled in %s, layered and pushed in %s (%d files)\n",
		compiled.Round(time.Millisecond), time.Since(pushStart).Round(time.Millisecond), nfiles)
	fmt.Println(ref.Context().Digest(d.String()).String())
	return nil
}
