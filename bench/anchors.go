package main

import (
	"context"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sless-dev/sless/local/podman"
)

const kanikoImage = "localhost/sless-bench/kaniko:v1.23.2"

// anchorContext is the Docker build context the anchors build: the same code as sless, with a
// Dockerfile FROM the base + COPY into /app/function.
func anchorContext(work, code, base string) (string, error) {
	dir := filepath.Join(work, "anchor-context")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := exec.Command("cp", "-r", code, dir).Run(); err != nil {
		return "", err
	}
	df := fmt.Sprintf("FROM %s\nCOPY . /app/function/\n", base)
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("Dockerfile\n.dockerignore\n"), 0o644)
}

func podmanCmd(ctx context.Context, work string, args ...string) *exec.Cmd {
	full := append(podman.GlobalFlags(filepath.Join(cacheDir(), "podman")), args...)
	cmd := exec.CommandContext(ctx, "podman", full...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf())
	return cmd
}

func containersConf() string {
	root, _ := repoRoot()
	return filepath.Join(root, "local", "podman", "containers.conf")
}

// runKaniko builds the anchor context with kaniko's executor under podman, as the seed system ran
// kaniko per build (minus the Kubernetes Job around it).
func runKaniko(ctx context.Context, c config, work, base, code, to string) *series {
	s := &series{name: "kaniko"}
	root := filepath.Join(cacheDir(), "podman")
	// Load the executor image into podman's storage (untimed; once per machine).
	if err := podmanCmd(ctx, work, "image", "exists", kanikoImage).Run(); err != nil {
		dst := fmt.Sprintf("containers-storage:[overlay@%s+%s]%s", filepath.Join(root, "root"), filepath.Join(root, "run"), kanikoImage)
		if out, err := exec.CommandContext(ctx, "skopeo", "copy", "-q", "oci:"+c.kaniko+":latest", dst).CombinedOutput(); err != nil {
			s.err = fmt.Errorf("loading kaniko image (run hack/build-kaniko.sh): %v\n%s", err, out)
			return s
		}
	}
	dir, err := anchorContext(work, code, base)
	if err != nil {
		s.err = err
		return s
	}
	for i := 0; i < c.kanikoRuns; i++ {
		if s.err = touch(dir, i+4000); s.err != nil {
			return s
		}
		args := append([]string{"run", "--rm"}, podmanRunFlags...)
		args = append(args, "-v", dir+":/workspace", kanikoImage,
			"--context", "dir:///workspace", "--dockerfile", "/workspace/Dockerfile", "--destination", to,
			"--insecure", "--insecure-pull", "--skip-tls-verify", "--skip-tls-verify-pull", "--verbosity", "warn")
		start := time.Now()
		out, err := podmanCmd(ctx, work, args...).CombinedOutput()
		if err != nil {
			s.err = fmt.Errorf("kaniko: %v\n%s", err, out)
			return s
		}
		s.ds = append(s.ds, time.Since(start))
		logf("  kaniko run %d: %s", i+1, ms(s.ds[len(s.ds)-1]))
	}
	return s
}

// runBuildah builds and pushes with buildah: once with empty storage (cold: the base is pulled),
// then warm.
func runBuildah(ctx context.Context, c config, work, base, code, to string) (cold, warm *series) {
	cold, warm = &series{name: "buildah cold"}, &series{name: "buildah warm"}
	broot := filepath.Join(work, "buildah")
	dir, err := anchorContext(work, code, base)
	if err != nil {
		cold.err = err
		return
	}
	bcmd := func(args ...string) *exec.Cmd {
		full := append([]string{"--root", filepath.Join(broot, "root"), "--runroot", filepath.Join(broot, "run"), "--storage-driver", "overlay"}, args...)
		cmd := exec.CommandContext(ctx, "buildah", full...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf())
		return cmd
	}
	once := func(i int) (time.Duration, error) {
		if err := touch(dir, i); err != nil {
			return 0, err
		}
		start := time.Now()
		if out, err := bcmd("bud", "--quiet", "--tls-verify=false", "-f", filepath.Join(dir, "Dockerfile"), "-t", to, dir).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("buildah bud: %v\n%s", err, out)
		}
		if out, err := bcmd("push", "--quiet", "--tls-verify=false", to, "docker://"+to).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("buildah push: %v\n%s", err, out)
		}
		return time.Since(start), nil
	}
	d, err := once(5000)
	if err != nil {
		cold.err = err
		return
	}
	cold.ds = append(cold.ds, d)
	logf("  buildah cold: %s", ms(d))
	for i := 0; i < c.buildahRuns; i++ {
		d, err := once(5001 + i)
		if err != nil {
			warm.err = err
			return
		}
		warm.ds = append(warm.ds, d)
		logf("  buildah warm %d: %s", i+1, ms(d))
	}
	// buildah's storage may hold root-owned overlay mounts; leave cleanup to RemoveAll of work.
	exec.Command("buildah", "--root", filepath.Join(broot, "root"), "--runroot", filepath.Join(broot, "run"), "rm", "--all").Run()
	return
}
