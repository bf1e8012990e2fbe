package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// benchDeps measures dependency layers through sless up: a cold install, a second function with
// the same manifest (cached layer), a code-only change; and buildah bud of the Dockerfile the seed
// generated (COPY requirements.txt, RUN pip install, COPY .) after a code-only change, with its
// layer cache warm. The packages come from a local simple index of generated wheels.
func benchDeps(ctx context.Context, c config, work, slessBin string) error {
	index, stopIndex, err := serveWheels(work, 20)
	if err != nil {
		return err
	}
	defer stopIndex()
	cl, stop, err := startSlessUp(ctx, work, slessBin, "deps-data", "--pip-index-url", index)
	if err != nil {
		return err
	}
	defer stop()
	var req strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&req, "benchpkg%02d==1.0\n", i)
	}
	handler := func(v int) string {
		return fmt.Sprintf("import benchpkg00\ndef handle(event):\n    return {'v': %d, 'dep': benchpkg00.VALUE}\n", v)
	}
	deploy := func(name string, v int) (*apiv1.Function, error) {
		z := zipOf(map[string]string{"handler.py": handler(v), "requirements.txt": req.String()})
		if _, err := cl.GetFunction(ctx, name); client.IsNotFound(err) {
			if _, err := cl.CreateFunction(ctx, apiv1.Function{Name: name, Runtime: "python3.11"}); err != nil {
				return nil, err
			}
		}
		up, err := cl.Upload(ctx, name, bytes.NewReader(z), int64(len(z)))
		if err != nil {
			return nil, err
		}
		for start := time.Now(); time.Since(start) < 3*time.Minute; time.Sleep(10 * time.Millisecond) {
			f, err := cl.GetFunction(ctx, name)
			if err != nil {
				return nil, err
			}
			if f.Status.CodeSHA256 == up.CodeSHA256 && f.Status.Phase == apiv1.PhaseReady && f.Status.Message == "" {
				return f, nil
			}
			if f.Status.Phase == apiv1.PhaseFailed {
				return nil, fmt.Errorf("%s failed: %s", name, f.Status.Message)
			}
		}
		return nil, fmt.Errorf("%s not ready", name)
	}
	logf("deps: cold install of 20 packages, cached-deps builds, code-only rebuilds, buildah with RUN pip install")
	cold, err := deploy("d0", 0)
	if err != nil {
		return err
	}
	cached, code := &series{}, &series{}
	for i := 1; i <= 5; i++ {
		f, err := deploy(fmt.Sprintf("d%d", i), i) // a new function, same manifest
		if err != nil {
			return err
		}
		if !f.Status.Build.DepsCached {
			return fmt.Errorf("d%d did not hit the cache", i)
		}
		cached.ds = append(cached.ds, time.Duration(f.Status.Build.DurationMS)*time.Millisecond)
		g, err := deploy("d0", 100+i) // code-only change
		if err != nil {
			return err
		}
		code.ds = append(code.ds, time.Duration(g.Status.Build.DurationMS)*time.Millisecond)
	}

	// buildah: the seed's generated Dockerfile, layer cache on, after a code-only change.
	runtimeRef := strings.SplitN(cold.Status.Image, "/", 2)[0] + "/sless/runtime-python3.11:latest"
	ctxDir := filepath.Join(work, "deps-buildah")
	os.MkdirAll(ctxDir, 0o755)
	os.WriteFile(filepath.Join(ctxDir, "requirements.txt"), []byte(req.String()), 0o644)
	df := fmt.Sprintf("FROM %s\nUSER 0\nCOPY requirements.txt /app/function/\nRUN python3 -m pip install --no-cache-dir --break-system-packages --target /app/deps -r /app/function/requirements.txt --index-url %s\nCOPY . /app/function/\nUSER 65532:65532\n", runtimeRef, index)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644)
	os.WriteFile(filepath.Join(ctxDir, ".dockerignore"), []byte("Dockerfile\n"), 0o644)
	broot := filepath.Join(work, "deps-buildah-storage")
	to := strings.SplitN(cold.Status.Image, "/", 2)[0] + "/bench/buildah-deps:latest"
	buildah := func(v int) (time.Duration, error) {
		os.WriteFile(filepath.Join(ctxDir, "handler.py"), []byte(handler(v)), 0o644)
		start := time.Now()
		for _, args := range [][]string{
			{"bud", "--quiet", "--layers", "--network", "host", "--tls-verify=false", "-f", filepath.Join(ctxDir, "Dockerfile"), "-t", to, ctxDir},
			{"push", "--quiet", "--tls-verify=false", to, "docker://" + to},
		} {
			cmd := exec.CommandContext(ctx, "buildah", append([]string{"--root", filepath.Join(broot, "root"), "--runroot", filepath.Join(broot, "run"), "--storage-driver", "overlay"}, args...)...)
			cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+containersConf())
			if out, err := cmd.CombinedOutput(); err != nil {
				return 0, fmt.Errorf("buildah %s: %v\n%s", args[0], err, out)
			}
		}
		return time.Since(start), nil
	}
	bCold, err := buildah(0)
	if err != nil {
		return err
	}
	bWarm := &series{}
	for i := 1; i <= 3; i++ {
		d, err := buildah(i)
		if err != nil {
			return err
		}
		bWarm.ds = append(bWarm.ds, d)
	}
	exec.Command("buildah", "--root", filepath.Join(broot, "root"), "--runroot", filepath.Join(broot, "run"), "rm", "--all").Run()

	fmt.Printf("\n### Dependency layers (python3.11, 20 packages from a local index; build = status.build.duration_ms)\n\n")
	fmt.Println("| build | median ms (min–max, n) |")
	fmt.Println("|---|---|")
	fmt.Printf("| sless: cold (pip install in a container, layer pushed to the cache) | %d ms (n=1) |\n", cold.Status.Build.DurationMS)
	fmt.Printf("| sless: new function, same manifest (cached layer mounted, no installer) | %s |\n", cached.summary())
	fmt.Printf("| sless: code-only change | %s |\n", code.summary())
	fmt.Printf("| buildah bud --layers + push, first (RUN pip install) | %d ms (n=1) |\n", bCold.Milliseconds())
	fmt.Printf("| buildah bud --layers + push, code-only change (RUN layer cached) | %s |\n", bWarm.summary())
	r := ratio(cached, code)
	v := "met"
	if r > 1.5 {
		v = "**missed**"
	}
	fmt.Printf("\n| target | measured | verdict |\n|---|---|---|\n| cached-deps build / code-only build ≤ 1.5× | %.2f× | %s |\n", r, v)
	return nil
}

func zipOf(files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, body := range files {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate}
		h.SetMode(0o644)
		if n == "bootstrap" { // a provided function's executable
			h.SetMode(0o755)
		}
		w, _ := zw.CreateHeader(h)
		w.Write([]byte(body))
	}
	zw.Close()
	return buf.Bytes()
}

// serveWheels serves n generated pure-Python wheels (benchpkgNN==1.0) as a simple index on
// 127.0.0.1 and returns its URL.
func serveWheels(work string, n int) (string, func(), error) {
	wheels := map[string][]byte{}
	names := map[string]string{}
	for i := 0; i < n; i++ {
		pkg := fmt.Sprintf("benchpkg%02d", i)
		body := fmt.Sprintf("VALUE = %d\n", i) + strings.Repeat("# padding line for a realistic module size\n", 2000)
		file, b := testenv.Wheel(pkg, "1.0", body)
		wheels[file], names[pkg] = b, file
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/", func(w http.ResponseWriter, r *http.Request) {
		pkg := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
		file, ok := names[pkg]
		if !ok {
			http.NotFound(w, r)
			return
		}
		sum := sha256.Sum256(wheels[file])
		fmt.Fprintf(w, "<a href=\"/files/%s#sha256=%s\">%s</a>", file, hex.EncodeToString(sum[:]), file)
	})
	mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) {
		b, ok := wheels[strings.TrimPrefix(r.URL.Path, "/files/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/simple", func() { srv.Close() }, nil
}
