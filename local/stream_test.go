package local_test

import (
	"context"
	"testing"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// TestStreamingThroughSlessUp: a python and a node function that stream, deployed on a real
// `sless up`: the first chunk comes through /fn/ while the handler still runs (< 300 ms, the
// handler sleeps 1 s before its second), and a client that goes mid-stream closes the handler's
// generator in its container (testenv.CheckStreaming).
func TestStreamingThroughSlessUp(t *testing.T) {
	podman := testenv.NewPodman(t)
	u := startUp(t, t.TempDir(), "", "")
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "1", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})
	for _, fn := range []struct{ name, runtime, file, code string }{
		{"pystream", "python3.11", "handler.py", testenv.StreamHandlerPython},
		{"jsstream", "nodejs22", "handler.js", testenv.StreamHandlerNode},
	} {
		t.Run(fn.runtime, func(t *testing.T) {
			// One instance: /closes must reach the one that served the stream.
			if _, err := u.c.CreateFunction(context.Background(), apiv1.Function{Name: fn.name, Runtime: fn.runtime, MaxReplicas: 1}); err != nil {
				t.Fatal(err)
			}
			if f := u.deploy(t, fn.name, fn.runtime, map[string]string{fn.file: fn.code}); f.Status.Phase != apiv1.PhaseReady {
				t.Fatalf("%s: %+v", fn.name, f.Status)
			}
			if code, body := u.get("/fn/" + ns + "/" + fn.name + "/closes"); code != 200 { // warm
				t.Fatalf("%d %s", code, body)
			}
			testenv.CheckStreaming(t, u.url+"/fn/"+ns+"/"+fn.name)
		})
	}
}
