package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sless-dev/sless/internal/k1n"
	"github.com/sless-dev/sless/internal/registry"
	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/oci"
)

// podmanRunFlags are what podman needs on these machines (DESIGN.md §7).
var podmanRunFlags = podman.RunFlags

func run(ctx context.Context, c config) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	fmt.Printf("## Benchmarks\n\nCommand: `make bench` (go run ./bench %s)\n", strings.Join(os.Args[1:], " "))
	work, err := os.MkdirTemp(cacheDir(), "bench-work-")
	if err != nil {
		return err
	}
	if !c.keep {
		defer os.RemoveAll(work)
	}
	slessBin := filepath.Join(work, "sless")
	build := exec.CommandContext(ctx, "go", "build", "-o", slessBin, "./cmd/sless")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building sless: %v\n%s", err, out)
	}
	want := map[string]bool{}
	for _, s := range strings.Split(c.sections, ",") {
		want[s] = true
	}
	if want["proxy"] {
		if err := benchProxy(ctx, c, work); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
	}
	if want["history"] {
		if err := benchHistory(ctx, c, work); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	if want["events"] {
		if err := benchEvents(ctx, c, work); err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	// The real cluster is brought up once for the sections that need it, and down at the end.
	var env *k1n.Env
	cluster := func() (*k1n.Env, error) {
		if env != nil {
			return env, nil
		}
		logf("bringing up the single-node cluster and installing sless (hack/k8s)")
		e, err := k1n.Start(os.Stderr)
		if err != nil {
			return nil, err
		}
		env = e
		return env, nil
	}
	defer func() {
		if env != nil {
			env.Close()
		}
	}()
	if want["k8s"] {
		if err := benchK8s(ctx, c, work, cluster); err != nil {
			return fmt.Errorf("k8s: %w", err)
		}
	}
	if want["coldstart"] {
		if err := benchColdStart(ctx, c, work, cluster); err != nil {
			return fmt.Errorf("coldstart: %w", err)
		}
	}
	if want["coldstart-up"] {
		if err := benchColdStartUp(ctx, c, work, slessBin); err != nil {
			return fmt.Errorf("coldstart-up: %w", err)
		}
	}
	if want["up"] {
		if err := benchUp(ctx, c, work, slessBin); err != nil {
			return fmt.Errorf("sless up: %w", err)
		}
	}
	if want["deps"] {
		if err := benchDeps(ctx, c, work, slessBin); err != nil {
			return fmt.Errorf("deps: %w", err)
		}
	}
	if want["terraform"] {
		if err := benchTerraform(ctx, c, work, slessBin); err != nil {
			return fmt.Errorf("terraform: %w", err)
		}
	}
	if !want["builder"] && !want["runtimes"] {
		return nil
	}
	for i, storage := range strings.Split(c.storage, ",") {
		var regRoot string
		switch storage {
		case "tmpfs":
			if regRoot, err = os.MkdirTemp("/dev/shm", "sless-bench-registry-"); err != nil {
				return err
			}
			defer os.RemoveAll(regRoot)
		case "disk":
			regRoot = filepath.Join(work, "registry")
		default:
			return fmt.Errorf("-storage: %q is neither tmpfs nor disk", storage)
		}
		if err := runOn(ctx, c, want, work, slessBin, storage, regRoot, i == 0); err != nil {
			return fmt.Errorf("registry on %s: %w", storage, err)
		}
	}
	return nil
}

// runOn measures everything against one registry whose storage is on tmpfs or on disk.
func runOn(ctx context.Context, c config, want map[string]bool, work, slessBin, storage, regRoot string, first bool) error {
	reg, err := registry.Start(ctx, registry.Config{RootDir: regRoot})
	if err != nil {
		return err
	}
	defer reg.Close()
	r := reg.Addr()
	logf("registry (CNCF Distribution v3) on %s, storage on %s (%s)", r, storage, regRoot)
	if !want["builder"] {
		if first && want["runtimes"] {
			return benchRuntimes(ctx, c, work, slessBin, r)
		}
		return nil
	}
	measureRSS := first

	largeRef := r + "/bench/base-large:latest"
	if err := pushLayout(ctx, c.largeBase, largeRef); err != nil {
		return fmt.Errorf("pushing the large base (run hack/build-bases.sh bench-debian): %w", err)
	}
	large, err := describeBase(ctx, largeRef)
	if err != nil {
		return err
	}
	logf("large base: %s", large)
	smallRef := r + "/bench/base-small:latest"
	if c.smallBase != "" {
		err = pushLayout(ctx, c.smallBase, smallRef)
	} else {
		err = pushRandom(smallRef, 10<<20)
	}
	if err != nil {
		return err
	}
	small, err := describeBase(ctx, smallRef)
	if err != nil {
		return err
	}
	logf("small base: %s", small)

	code10k, err := genCode(filepath.Join(work, "code-10k"), 10<<10, 10)
	if err != nil {
		return err
	}
	code10m, err := genCode(filepath.Join(work, "code-10m"), 10<<20, 100)
	if err != nil {
		return err
	}

	t := &table{}
	b, err := oci.NewBuilder()
	if err != nil {
		return err
	}
	logf("sless in-process, 10 KB, large base")
	s10k := inProcess(ctx, b, largeRef, code10k, r+"/bench/fn-10k:latest", c.iterations)
	logf("sless in-process, 10 MB, large base")
	s10m := inProcess(ctx, b, largeRef, code10m, r+"/bench/fn-10m:latest", max(3, c.iterations/3))
	logf("sless in-process, 10 KB, small base")
	s10kSmall := inProcess(ctx, b, smallRef, code10k, r+"/bench/fn-10k-small:latest", c.iterations)
	logf("sless CLI, 10 KB and 10 MB")
	cli10k := cli(ctx, slessBin, largeRef, code10k, r+"/bench/cli-10k:latest", c.cliRuns)
	cli10m := cli(ctx, slessBin, largeRef, code10m, r+"/bench/cli-10m:latest", max(3, c.cliRuns/2))
	logf("floor: gzip+sha256 + POST/PUT per blob + PUT manifest")
	f10k, err := floor(ctx, largeRef, code10k, r+"/bench/floor-10k", c.iterations)
	if err != nil {
		return err
	}
	f10m, err := floor(ctx, largeRef, code10m, r+"/bench/floor-10m", max(3, c.iterations/3))
	if err != nil {
		return err
	}
	for _, s := range []*series{s10k, s10m, s10kSmall, cli10k, cli10m, f10k, f10m} {
		if s.err != nil {
			return fmt.Errorf("%s: %w", s.name, s.err)
		}
	}

	var kaniko, bCold, bWarm *series
	if !c.skipKaniko {
		logf("kaniko %d× (podman, FROM large base + COPY, push)", c.kanikoRuns)
		kaniko = runKaniko(ctx, c, work, largeRef, code10k, r+"/bench/kaniko:latest")
		if kaniko.err != nil {
			return kaniko.err
		}
	}
	if !c.skipBuildah {
		logf("buildah bud + push, cold then %d× warm", c.buildahRuns)
		bCold, bWarm = runBuildah(ctx, c, work, largeRef, code10k, r+"/bench/buildah:latest")
		if bCold.err != nil {
			return bCold.err
		}
		if bWarm.err != nil {
			return bWarm.err
		}
	}

	var rss int64
	var rssTime time.Duration
	if measureRSS {
		logf("peak RSS of sless build for 200 MB of code")
		code200m, err := genCode(filepath.Join(work, "code-200m"), 200<<20, 200)
		if err != nil {
			return err
		}
		if rss, rssTime, err = peakRSS(ctx, slessBin, largeRef, code200m, r+"/bench/fn-200m:latest"); err != nil {
			return err
		}
		os.RemoveAll(code200m)
	}

	// The report.
	fmt.Printf("\n### Registry storage on %s (%s, %s)\n\n", storage, time.Now().UTC().Format("2006-01-02 15:04 MST"), hostSummary())
	fmt.Printf("Registry: CNCF Distribution v3.1.2 (embedded, filesystem driver, storage on %s) on 127.0.0.1.\n", storage)
	fmt.Printf("Large base: %s. Small base: %s.\n", large, small)
	fmt.Printf("Each figure is the median (min–max) over the runs shown; every sless build changes one line of code first.\n\n")
	t.header()
	t.row("floor: gzip+sha256 + 5 requests, 10 KB", f10k, nil)
	t.row("sless in-process (long-lived Builder), 10 KB", s10k, f10k)
	t.row("sless CLI process, 10 KB", cli10k, f10k)
	t.row("floor, 10 MB", f10m, nil)
	t.row("sless in-process, 10 MB", s10m, f10m)
	t.row("sless CLI process, 10 MB", cli10m, f10m)
	t.row("sless in-process, 10 KB, on the 10 MB base", s10kSmall, f10k)
	if kaniko != nil {
		t.row("kaniko v1.23.2 (podman), 10 KB", kaniko, f10k)
	}
	if bCold != nil {
		t.row("buildah bud + push, cold (base not in storage), 10 KB", bCold, f10k)
		t.row("buildah bud + push, warm, 10 KB", bWarm, f10k)
	}
	fmt.Println()
	fmt.Println("| target | measured | verdict |")
	fmt.Println("|---|---|---|")
	check := func(what string, got float64, op string, want float64, unit string) {
		ok := (op == "≤" && got <= want) || (op == "≥" && got >= want)
		v := "met"
		if !ok {
			v = "**missed**"
		}
		fmt.Printf("| %s %s %g%s | %.2f%s | %s |\n", what, op, want, unit, got, unit, v)
	}
	check("10 KB in-process / floor", ratio(s10k, f10k), "≤", 1.3, "×")
	if kaniko != nil {
		check("kaniko / sless 10 KB in-process", ratio(kaniko, s10k), "≥", 100, "×")
	}
	if bWarm != nil {
		check("buildah warm / sless 10 KB in-process", ratio(bWarm, s10k), "≥", 15, "×")
	}
	check("10 KB on large base / on 10 MB base", ratio(s10k, s10kSmall), "≤", 1.2, "×")
	if measureRSS {
		check("peak RSS of sless build, 200 MB of code", float64(rss)/(1<<20), "≤", 64, " MiB")
		fmt.Printf("\n200 MB of code (%d files) through the CLI took %d ms, peak RSS (VmHWM) %.1f MiB.\n",
			200, rssTime.Milliseconds(), float64(rss)/(1<<20))
		if want["runtimes"] {
			return benchRuntimes(ctx, c, work, slessBin, r)
		}
	}
	return nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func pushRandom(ref string, size int64) error {
	img, err := random.Image(size, 1)
	if err != nil {
		return err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	return remote.Write(r, img)
}

func hostSummary() string {
	out, _ := exec.Command("nproc").Output()
	return strings.TrimSpace(string(out)) + " cores"
}

// peakRSS runs the CLI once and follows its VmHWM (the kernel's high-water mark of resident
// memory) in /proc until it exits. rusage is not used: with pidfd-based waits its maxrss can cover
// earlier children (the go build above) too.
func peakRSS(ctx context.Context, bin, base, dir, to string) (int64, time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, "build", "--quiet", "--runtime-image", base, "--src", dir, "--to", to)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return 0, 0, fmt.Errorf("sless build of 200 MB: %v\n%s", err, out.String())
			}
			return peak, time.Since(start), nil
		case <-tick.C:
			if b, err := os.ReadFile(status); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						var kb int64
						fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
						peak = max(peak, kb*1024)
					}
				}
			}
		}
	}
}
