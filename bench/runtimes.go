package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// runtimeCases are the runtimes the section measures, python3.11 first: the others' code-only
// rebuilds are compared with its. provided's code is examples/hello-go built with the machine's Go
// (a static bootstrap); its one-line change goes to a file beside the binary, so each rebuild
// packs the whole binary again, as a new upload of a provided function does.
var runtimeCases = []struct{ runtime, example, handlerFile, comment string }{
	{"python3.11", "hello-python", "handler.py", "#"},
	{"python3.13", "hello-python", "handler.py", "#"},
	{"nodejs20", "hello-node", "handler.js", "//"},
	{"nodejs22", "hello-node", "handler.js", "//"},
	{"nodejs24", "hello-node", "handler.js", "//"},
	{"provided", "hello-go", "VERSION", "#"},
}

// rebuildCase is one row of the code-only rebuild table: a runtime with an example's code, and
// the row with the same code on the oldest runtime of its kind it is also compared with (a
// runtime's own cost, apart from what its example's code weighs).
type rebuildCase struct{ label, runtime, example, handlerFile, comment, sameCode string }

// withBinary is python3.11 with hello-python's code and hello-go's bootstrap beside it: the code
// provided's rebuild packs, on the reference runtime.
const withBinary = "hello-python+go"

// slug is label as a repository and function name ("python3.11 + bootstrap" → "python3-11-bootstrap").
func slug(label string) string {
	return strings.NewReplacer(".", "-", " ", "", "+", "-").Replace(label)
}

func rebuildCases() []rebuildCase {
	var out []rebuildCase
	for _, tc := range runtimeCases {
		c := rebuildCase{label: tc.runtime, runtime: tc.runtime, example: tc.example, handlerFile: tc.handlerFile, comment: tc.comment}
		switch tc.example {
		case "hello-python":
			c.sameCode = "python3.11"
		case "hello-node":
			c.sameCode = "nodejs20"
		case "hello-go":
			c.sameCode = "python3.11 + bootstrap"
		}
		out = append(out, c)
	}
	return append(out, rebuildCase{label: "python3.11 + bootstrap", runtime: "python3.11", example: withBinary, handlerFile: "handler.py", comment: "#"})
}

// exampleCode is the directory of tc's example code: examples/<example>/code, or for hello-go a
// directory under work with its bootstrap built (once) and an empty VERSION file, or for
// withBinary hello-python's code with that bootstrap beside it.
func exampleCode(ctx context.Context, work, example string) (string, error) {
	root, _ := repoRoot()
	if example == withBinary {
		dir := filepath.Join(work, withBinary+"-code")
		if _, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil {
			return dir, nil
		}
		goDir, err := exampleCode(ctx, work, "hello-go")
		if err != nil {
			return "", err
		}
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "hello-python", "code"))); err != nil {
			return "", err
		}
		bin, err := os.ReadFile(filepath.Join(goDir, "bootstrap"))
		if err != nil {
			return "", err
		}
		return dir, os.WriteFile(filepath.Join(dir, "bootstrap"), bin, 0o755)
	}
	if example != "hello-go" {
		return filepath.Join(root, "examples", example, "code"), nil
	}
	dir := filepath.Join(work, "hello-go-code")
	if _, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bootstrap"), ".")
	cmd.Dir, cmd.Env = filepath.Join(root, "examples", example, "src"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", example, err, out)
	}
	return dir, os.WriteFile(filepath.Join(dir, "VERSION"), nil, 0o644)
}

// benchRuntimes builds each language runtime's image and its hello example, then measures under
// podman: the image size, cold start (podman run → first 200 from the handler, image already
// pulled) and the latency of sequential requests to a running function on loopback; then a
// code-only rebuild on each runtime image (one-line change → pushed image, the long-lived Builder
// as sless up and the operator run it), the runtimes taking turns so that load from elsewhere on
// the machine falls on all of them alike, each beside python3.11's.
func benchRuntimes(ctx context.Context, c config, work, slessBin, reg string) error {
	fmt.Printf("\n### Runtimes (podman %s, runc, --network host; %s, %s, load average %s at the start)\n\n", podmanVersion(ctx, work),
		time.Now().UTC().Format("2006-01-02 15:04 MST"), hostSummary(), loadavg())
	fmt.Println("| runtime | interpreter | image (compressed) | cold start: podman run → first 200, median (min–max, n) | request p50 / p99 (n=1000, keep-alive) |")
	fmt.Println("|---|---|---|---|---|")
	b, err := oci.NewBuilder()
	if err != nil {
		return err
	}
	var uidRows []string
	runtimeRefs := map[string]string{}
	for _, tc := range runtimeCases {
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
		runtimeRefs[tc.runtime] = runtimeRef.String()
		code, err := exampleCode(ctx, work, tc.example)
		if err != nil {
			return err
		}
		fres, err := b.Build(ctx, oci.Source{RuntimeImage: runtimeRef.String(), Dir: os.DirFS(code), Handler: "handler.handle"})
		if err != nil {
			return err
		}
		image, err := b.Push(ctx, fres, reg+"/bench/"+tc.example+"-"+tc.runtime+":latest")
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
		version := []string{"python3", "-c", "import platform; print('Python', platform.python_version())"}
		switch rt.Language {
		case "node":
			version = []string{"node", "-p", "'Node.js ' + process.version"}
		case "custom":
			version = []string{"sh", "-c", ". /etc/os-release; echo \"$PRETTY_NAME, no language\""}
		}
		out, err := podmanCmd(ctx, work, append(append([]string{"run", "--rm"}, podmanRunFlags...), append([]string{image.String()}, version...)...)...).Output()
		if err != nil {
			return fmt.Errorf("%s: the interpreter's version: %v", tc.runtime, err)
		}
		logf("runtimes: %s (%s), cold starts and requests", tc.runtime, strings.TrimSpace(string(out)))
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
		fmt.Printf("| %s | %s | %.1f MB | %s | %d µs / %d µs |\n", tc.runtime, strings.TrimSpace(string(out)), float64(size)/1e6, cold.summary(),
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
	return rebuildPerRuntime(ctx, c, b, work, slessBin, reg, runtimeRefs)
}

// rebuildPerRuntime times code-only rebuilds of each hello example on its runtime image: a
// one-line change to the handler, then Build + Push (what a sless build does once the code is
// fetched; n is 3 × -n); and the same change uploaded to a function of each runtime on sless up,
// the build as the function's status reports it (status.build.duration_ms: fetch from the code
// store, the dependency check, build and push; n is -cli-runs). Rounds go through the runtimes in
// turn.
func rebuildPerRuntime(ctx context.Context, c config, b *oci.Builder, work, slessBin, reg string, runtimeRefs map[string]string) error {
	rounds := 3 * c.iterations // a rebuild takes milliseconds: more rounds steady the medians cheaply
	cases := rebuildCases()
	logf("runtimes: code-only rebuilds, %d rounds over %d cases", rounds, len(cases))
	dirs := map[string]string{}
	src := map[string][]byte{}
	for _, tc := range cases {
		dir := filepath.Join(work, "rebuild-"+slug(tc.label))
		code, err := exampleCode(ctx, work, tc.example)
		if err != nil {
			return err
		}
		if err := os.CopyFS(dir, os.DirFS(code)); err != nil {
			return err
		}
		orig, err := os.ReadFile(filepath.Join(dir, tc.handlerFile))
		if err != nil {
			return err
		}
		dirs[tc.label], src[tc.label] = dir, orig
	}
	rebuilds := map[string]*series{}
	for i := 0; i < rounds+warmups; i++ {
		for _, tc := range cases {
			code := append(slices.Clone(src[tc.label]), fmt.Sprintf("%s build %d\n", tc.comment, i)...)
			if err := os.WriteFile(filepath.Join(dirs[tc.label], tc.handlerFile), code, 0o644); err != nil {
				return err
			}
			start := time.Now()
			res, err := b.Build(ctx, oci.Source{RuntimeImage: runtimeRefs[tc.runtime], Dir: os.DirFS(dirs[tc.label]), Handler: "handler.handle"})
			if err != nil {
				return err
			}
			_, err = b.Push(ctx, res, reg+"/bench/rebuild-"+slug(tc.label)+":latest")
			d := time.Since(start)
			res.Close()
			if err != nil {
				return err
			}
			s := rebuilds[tc.label]
			if s == nil {
				s = &series{name: "rebuild " + tc.label}
				rebuilds[tc.label] = s
			}
			if i >= warmups {
				s.ds = append(s.ds, d)
			}
		}
	}
	up, err := rebuildOnUp(ctx, c, work, slessBin, cases)
	if err != nil {
		return fmt.Errorf("code-only rebuilds on sless up: %w", err)
	}
	first := cases[0].label
	fmt.Printf("\nCode-only rebuilds, one-line change → pushed image (load average %s at the end). The target: each runtime's within 1.3× of %s's;"+
		" \"same code\" compares a runtime with the oldest of its kind carrying the same code (provided: python3.11 with hello-python and the same bootstrap beside it).\n", loadavg(), first)
	fmt.Printf("\n| case | in-process Build + Push, median (min–max, n) | × %s | × same code | sless up: status.build.duration_ms, median (min–max, n) | × %s | × same code | ≤ 1.3× |\n", first, first)
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, tc := range cases {
		r1, r2 := ratio(rebuilds[tc.label], rebuilds[first]), ratio(up[tc.label], up[first])
		s1, s2 := "–", "–"
		v := "(reference)"
		if tc.sameCode != "" && tc.sameCode != tc.label {
			q1, q2 := ratio(rebuilds[tc.label], rebuilds[tc.sameCode]), ratio(up[tc.label], up[tc.sameCode])
			s1, s2 = fmt.Sprintf("%.2f×", q1), fmt.Sprintf("%.2f×", q2)
			switch {
			case max(r1, r2) <= 1.3:
				v = "met"
			case max(q1, q2) <= 1.3:
				v = "met on the same code; **missed** against " + first + "'s code"
			default:
				v = "**missed**"
			}
		} else if tc.label != first && tc.sameCode == "" {
			v = "(anchor)"
		} else if tc.label != first {
			v = "met"
			if max(r1, r2) > 1.3 {
				v = "**missed**"
			}
		}
		fmt.Printf("| %s | %s | %.2f× | %s | %s | %.2f× | %s | %s |\n", tc.label, rebuilds[tc.label].summary(), r1, s1, up[tc.label].summary(), r2, s2, v)
	}
	return nil
}

// rebuildOnUp creates one hello function per runtime on a fresh sless up and uploads a one-line
// change to each in turn, -cli-runs times after the first build, and returns each runtime's build
// durations as the function's status reports them.
func rebuildOnUp(ctx context.Context, c config, work, slessBin string, cases []rebuildCase) (map[string]*series, error) {
	// Uploads as fast as builds allow: the per-namespace upload rate is not what is measured.
	cl, stop, err := startSlessUp(ctx, work, slessBin, "runtimes-data", "--upload-rate", "0")
	if err != nil {
		return nil, err
	}
	defer stop()
	logf("runtimes: code-only changes on sless up, %d rounds over %d cases", c.cliRuns, len(cases))
	out := map[string]*series{}
	for i := 0; i <= c.cliRuns; i++ {
		for _, tc := range cases {
			fn := "rt-" + slug(tc.label)
			if i == 0 {
				if _, err := cl.CreateFunction(ctx, apiv1.Function{Name: fn, Runtime: tc.runtime}); err != nil {
					return nil, err
				}
			}
			files := map[string]string{}
			dir, err := exampleCode(ctx, work, tc.example)
			if err != nil {
				return nil, err
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					return nil, err
				}
				files[e.Name()] = string(b)
			}
			files[tc.handlerFile] += fmt.Sprintf("%s change %d\n", tc.comment, i)
			z := zipOf(files)
			up, err := cl.Upload(ctx, fn, bytes.NewReader(z), int64(len(z)))
			if err != nil {
				return nil, err
			}
			f, err := waitBuilt(ctx, cl, fn, up.CodeSHA256)
			if err != nil {
				return nil, err
			}
			if out[tc.label] == nil {
				out[tc.label] = &series{name: "up rebuild " + tc.label}
			}
			if i > 0 { // the first build is the function's creation, not a code-only change
				out[tc.label].ds = append(out[tc.label].ds, time.Duration(f.Status.Build.DurationMS)*time.Millisecond)
			}
		}
	}
	return out, nil
}

// waitBuilt waits until fn runs the code sha (Ready) and returns it.
func waitBuilt(ctx context.Context, cl *client.Client, fn, sha string) (*apiv1.Function, error) {
	for start := time.Now(); time.Since(start) < 3*time.Minute; time.Sleep(10 * time.Millisecond) {
		f, err := cl.GetFunction(ctx, fn)
		if err != nil {
			return nil, err
		}
		if f.Status.CodeSHA256 == sha && f.Status.Phase == apiv1.PhaseReady && f.Status.Message == "" && f.Status.Build != nil {
			return f, nil
		}
		if f.Status.Phase == apiv1.PhaseFailed {
			return nil, fmt.Errorf("%s failed: %s", fn, f.Status.Message)
		}
	}
	return nil, fmt.Errorf("%s not ready within 3 minutes", fn)
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
