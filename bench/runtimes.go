package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// benchRuntimes builds each runtime image and its hello example, then measures under podman: the
// image size, cold start (podman run → first 200 from the handler, image already pulled) and the
// latency of sequential requests to a running function on loopback.
func benchRuntimes(ctx context.Context, c config, work, reg string) error {
	fmt.Printf("\n### Runtimes (podman %s, runc, --network host)\n\n", podmanVersion(ctx, work))
	fmt.Println("| runtime | image (compressed) | cold start: podman run → first 200, median (min–max, n) | request p50 / p99 (n=1000, keep-alive) |")
	fmt.Println("|---|---|---|---|")
	b, err := oci.NewBuilder()
	if err != nil {
		return err
	}
	root, _ := repoRoot()
	var uidRows []string
	for _, tc := range []struct{ runtime, example string }{{"python3.11", "hello-python"}, {"nodejs20", "hello-node"}} {
		rt, _ := runtimes.Lookup(tc.runtime)
		baseRef := reg + "/sless/base-" + tc.runtime + ":latest"
		if err := pushLayout(ctx, filepath.Join(cacheDir(), "bases", tc.runtime), baseRef); err != nil {
			return fmt.Errorf("pushing the %s base (hack/build-bases.sh %s): %w", tc.runtime, tc.runtime, err)
		}
		rres, err := b.BuildRuntime(ctx, oci.RuntimeSource{Base: baseRef, Name: rt.Name, Files: rt.Files(), Dir: "/app", Cmd: rt.Cmd, Env: rt.Env})
		if err != nil {
			return err
		}
		runtimeRef, err := b.Push(ctx, rres, reg+"/sless/runtime-"+tc.runtime+":latest")
		rres.Close()
		if err != nil {
			return err
		}
		fres, err := b.Build(ctx, oci.Source{RuntimeImage: runtimeRef.String(), Dir: os.DirFS(filepath.Join(root, "examples", tc.example, "code")), Handler: "handler.handle"})
		if err != nil {
			return err
		}
		image, err := b.Push(ctx, fres, reg+"/bench/"+tc.example+":latest")
		fres.Close()
		if err != nil {
			return err
		}
		img, err := remote.Image(image)
		if err != nil {
			return err
		}
		m, _ := img.Manifest()
		var size int64
		for _, l := range m.Layers {
			size += l.Size
		}
		if out, err := podmanCmd(ctx, work, "pull", "-q", "--tls-verify=false", image.String()).CombinedOutput(); err != nil {
			return fmt.Errorf("podman pull: %v\n%s", err, out)
		}
		cold := &series{name: "cold " + tc.runtime}
		var lat []time.Duration
		for i := 0; i < 3; i++ {
			d, l, err := coldStart(ctx, work, image, i == 2)
			if err != nil {
				return err
			}
			cold.ds = append(cold.ds, d)
			lat = append(lat, l...)
		}
		slices.Sort(lat)
		fmt.Printf("| %s | %.1f MB | %s | %d µs / %d µs |\n", tc.runtime, float64(size)/1e6, cold.summary(),
			lat[len(lat)/2].Microseconds(), lat[len(lat)*99/100].Microseconds())
		// A new tenant's first start: its container in a uid range never used before (sless up's
		// --uidmap onto the tenant's range; idmapped overlay mounts, no copy of the image), side
		// by side with the same start unmapped.
		mapped, plain := &series{name: "new range " + tc.runtime}, &series{name: "unmapped " + tc.runtime}
		for i := 0; i < 5; i++ {
			base := 1<<30 + (time.Now().UnixNano()%4096)*65536 // a range no earlier run used
			m := fmt.Sprintf("0:%d:65536", base)
			d, _, err := coldStart(ctx, work, image, false, "--uidmap", m, "--gidmap", m)
			if err != nil {
				return err
			}
			mapped.ds = append(mapped.ds, d)
			if d, _, err = coldStart(ctx, work, image, false); err != nil {
				return err
			}
			plain.ds = append(plain.ds, d)
		}
		uidRows = append(uidRows, fmt.Sprintf("| %s | %s | %s | %.2f |", tc.runtime, mapped.summary(), plain.summary(),
			ratio(mapped, plain)))
	}
	fmt.Println("\n| runtime | cold start, a new tenant's uid range (n) | cold start, unmapped (n) | ratio |")
	fmt.Println("|---|---|---|---|")
	for _, r := range uidRows {
		fmt.Println(r)
	}
	return nil
}

func podmanVersion(ctx context.Context, work string) string {
	out, err := podmanCmd(ctx, work, "version", "--format", "{{.Client.Version}}").Output()
	if err != nil {
		return "?"
	}
	return string(out[:len(out)-1])
}

// coldStart runs the image, waits for the handler's first 200 and, if asked, times 1,000 requests.
func coldStart(ctx context.Context, work string, image name.Digest, requests bool, extra ...string) (time.Duration, []time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cname := fmt.Sprintf("sless-bench-%d", port)
	args := append([]string{"run", "-d", "--rm", "--name", cname}, podmanRunFlags...)
	args = append(append(args, extra...), "-e", fmt.Sprintf("PORT=%d", port), "-e", "HOST=127.0.0.1", image.String())
	start := time.Now()
	if out, err := podmanCmd(ctx, work, args...).CombinedOutput(); err != nil {
		return 0, nil, fmt.Errorf("podman run: %v\n%s", err, out)
	}
	defer podmanCmd(context.Background(), work, "rm", "-f", "-t", "1", cname).Run()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			return 0, nil, fmt.Errorf("%s: no 200 within 30 s", image)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cold := time.Since(start)
	if !requests {
		return cold, nil, nil
	}
	var lat []time.Duration
	for i := 0; i < 1000; i++ {
		s := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return 0, nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(s))
	}
	return cold, lat, nil
}
