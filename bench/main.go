package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"
)

type config struct {
	iterations  int
	cliRuns     int
	kanikoRuns  int
	buildahRuns int
	skipKaniko  bool
	skipBuildah bool
	largeBase   string // OCI layout
	smallBase   string // OCI layout
	kaniko      string // OCI layout of the kaniko executor image
	keep        bool
	storage     string
	sections    string
	proxyConc   int
}

func main() {
	var c config
	cache := cacheDir()
	flag.IntVar(&c.iterations, "n", 15, "in-process builds per measurement (median reported)")
	flag.IntVar(&c.cliRuns, "cli-runs", 7, "runs of the sless build CLI per measurement")
	flag.IntVar(&c.kanikoRuns, "kaniko-runs", 3, "kaniko builds")
	flag.IntVar(&c.buildahRuns, "buildah-runs", 3, "warm buildah builds")
	flag.BoolVar(&c.skipKaniko, "skip-kaniko", false, "leave out kaniko")
	flag.BoolVar(&c.skipBuildah, "skip-buildah", false, "leave out buildah")
	flag.StringVar(&c.largeBase, "large-base", filepath.Join(cache, "bases", "bench-debian"), "OCI layout of the large base")
	flag.StringVar(&c.smallBase, "small-base", "", "OCI layout of the small base (default: a generated 10 MB image)")
	flag.StringVar(&c.kaniko, "kaniko-layout", filepath.Join(cache, "kaniko-v1.23.2", "layout"), "OCI layout of the kaniko executor image")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory")
	flag.StringVar(&c.sections, "sections", "builder,runtimes,proxy,history,events,up,deps,terraform,k8s,coldstart,coldstart-up", "what to measure: builder (with kaniko, buildah), runtimes, proxy, history (/fn/ with invocation recording into PostgreSQL vs off, and the rows/s one store writes), events (a rabbitmq trigger and asynchronous invocation beside /fn/), up (sless up end to end), deps, terraform, k8s (the real single-node cluster, with kaniko in it), coldstart (cold starts and a ramp on the real cluster, beside the Kubernetes readiness path), coldstart-up (cold starts on sless up)")
	flag.IntVar(&c.proxyConc, "proxy-clients", 8, "concurrent keep-alive clients in the proxy benchmark")
	flag.StringVar(&c.storage, "storage", "tmpfs,disk", "where the registry stores blobs, one table each: tmpfs (registry cost near zero, isolates the builders) and/or disk (fsync per write)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func cacheDir() string {
	if d := os.Getenv("SLESS_CACHE"); d != "" {
		return d
	}
	d, _ := os.UserCacheDir()
	return filepath.Join(d, "sless")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
