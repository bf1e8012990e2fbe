package local_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
	"github.com/sless-dev/sless/runspec"
)

// Bounded work for tenant output on a single host (issue 27): a job's output is capped on disk as
// an instance's is, its status message is clipped to 4 KiB, and a namespace's log reads without
// follow are bounded.
func TestBoundedOutputUp(t *testing.T) {
	podman := testenv.NewPodman(t)
	u := startUp(t, t.TempDir(), "", "")
	ctx := context.Background()
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "0", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})

	// A job writes 20 MiB to stdout, then holds (so that its log can be looked at), then ends
	// with 12 lines of 6 KB on stderr and exit code 3 (the message: the last 10, 60 KB), or a last
	// line of 6 KB on stdout and 0. (podman keeps lines of up to 8 KiB whole.)
	const handler = "import os, sys, time\n" +
		"def handle(event):\n" +
		"    chunk = 'x' * (1 << 20)\n" +
		"    for _ in range(20):\n" +
		"        print(chunk, flush=True)\n" +
		"    print('WRITTEN', flush=True)\n" +
		"    time.sleep(event['hold'])\n" +
		"    out = sys.stderr if event['fail'] else sys.stdout\n" +
		"    for i in range(12 if event['fail'] else 1):\n" +
		"        out.write(str(i) + 'y' * 6000 + '\\n')\n" +
		"    out.write('y' * 6000 + ' THE END\\n')\n" +
		"    out.flush()\n" +
		"    os._exit(3 if event['fail'] else 0)\n"
	if f := u.deploy(t, "chatty", "python3.11", map[string]string{"handler.py": handler}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("%+v", f.Status)
	}

	t.Run("a job's output is capped and its message clipped", func(t *testing.T) {
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "loud", FunctionRef: "chatty", EventJSON: `{"hold": 20, "fail": true}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		// The run's container and the file podman keeps its output in, once it has written all.
		var logPath string
		waitFor(t, 60*time.Second, func() bool {
			out, err := podman.Command(ctx, "ps", "-a", "--filter", "label="+runspec.LabelJob+"=loud", "--format", "{{.Names}}").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				return false
			}
			p, err := podman.Command(ctx, "inspect", "--format", "{{.HostConfig.LogConfig.Path}}", strings.TrimSpace(string(out))).Output()
			logPath = strings.TrimSpace(string(p))
			return err == nil && logPath != "" && tailContains(logPath, "WRITTEN")
		}, "the job to write 20 MiB")
		st, err := os.Stat(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 8<<20+64<<10 {
			t.Errorf("the job's 20 MiB of output take %.1f MiB on disk, want at most the 8 MiB of an instance's log", float64(st.Size())/(1<<20))
		}
		t.Logf("20 MiB of output: a log file of %.1f MiB", float64(st.Size())/(1<<20))
		j := waitJob(t, u, "loud", 1)
		if j.Status.Phase != apiv1.JobFailed || len(j.Status.Message) > runspec.MaxResultBytes || !strings.HasSuffix(j.Status.Message, "y THE END") ||
			!utf8.ValidString(j.Status.Message) {
			t.Errorf("a failed run's 60 KB of stderr: %s, a message of %d bytes ending %q", j.Status.Phase, len(j.Status.Message),
				j.Status.Message[max(0, len(j.Status.Message)-20):])
		}
		if _, err := u.c.PutJob(ctx, apiv1.Job{Name: "loud", FunctionRef: "chatty", EventJSON: `{"hold": 0, "fail": false}`, RunID: 2}); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, u, "loud", 2); j.Status.Phase != apiv1.JobSucceeded || len(j.Status.Message) > runspec.MaxResultBytes ||
			!strings.HasSuffix(j.Status.Message, "y THE END") {
			t.Errorf("a run's 6 KB last line: %s, a message of %d bytes ending %q", j.Status.Phase, len(j.Status.Message),
				j.Status.Message[max(0, len(j.Status.Message)-20):])
		}
	})

	t.Run("log reads without follow are bounded per namespace", func(t *testing.T) {
		// 7 MB of lines in the instance's log: an answer that does not fit the sockets' buffers.
		const talker = "def handle(event):\n    for i in range(1000):\n        print(str(i) + ' ' + 'z' * 7000)\n    return 'ok'\n"
		if f := u.deploy(t, "verbose", "python3.11", map[string]string{"handler.py": talker}); f.Status.Phase != apiv1.PhaseReady {
			t.Fatalf("%+v", f.Status)
		}
		resp, err := http.Get(u.url + "/fn/" + ns + "/verbose/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		path := "/v1/namespaces/" + ns + "/functions/verbose/logs?tail=10000"
		waitFor(t, 30*time.Second, func() bool {
			code, body := u.getLogs(t, path)
			return code == 200 && strings.Contains(body, `"line":"999 zzz`)
		}, "the instance's 1000 long lines in its log")

		// Four readers that do not read: each answer waits on its client, holding its slot.
		var held []net.Conn
		for range 4 {
			held = append(held, testenv.HeldRead(t, u.url, path, u.token))
		}
		code, hdr, body := u.getLogsHeader(t, path)
		if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"throttled"`) {
			t.Errorf("a 5th read while 4 are held: %d, Retry-After %q, %.200s; want 429 throttled, Retry-After 1", code, hdr.Get("Retry-After"), body)
		}
		other := otherTenant(t, u, "bounded-other@example.com")
		if _, err := other.CreateFunction(ctx, apiv1.Function{Name: "verbose", Runtime: "python3.11"}); err != nil {
			t.Fatal(err)
		}
		if err := other.Logs(ctx, "verbose", client.LogsOptions{}, func(apiv1.LogLine) error { return nil }); err != nil {
			t.Errorf("another namespace's read while this one's are held: %v", err)
		}
		for _, c := range held {
			c.Close()
		}
		// Their writes fail once the clients are gone, which frees the slots.
		waitFor(t, 30*time.Second, func() bool { code, _ := u.getLogs(t, path); return code == 200 }, "a read to be answered again")
	})
}

// tailContains reports whether the last 64 KiB of the file at path contain s.
func tailContains(path, s string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	b := make([]byte, min(st.Size(), 64<<10))
	n, _ := f.ReadAt(b, st.Size()-int64(len(b)))
	return strings.Contains(string(b[:n]), s)
}

// getLogs reads …/logs (path) with the tenant's token: the status and the body.
func (u *up) getLogs(t *testing.T, path string) (int, string) {
	code, _, body := u.getLogsHeader(t, path)
	return code, body
}

func (u *up) getLogsHeader(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	return testenv.AuthGet(t, u.url+path, u.token)
}
