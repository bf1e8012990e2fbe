package k8s_test

import (
	"context"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// TestStreamingOnKubernetes: a python and a node function that stream, through the cluster's
// /fn/ (the API pods' proxy to the function's pod): the first chunk comes while the handler still
// runs (< 300 ms, the handler sleeps 1 s before its second), and a client that goes mid-stream
// closes the handler's generator in its pod (testenv.CheckStreaming).
func TestStreamingOnKubernetes(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("stream"))
	for _, fn := range []struct{ name, runtime, file, code string }{
		{"pystream", "python3.13", "handler.py", testenv.StreamHandlerPython},
		{"jsstream", "nodejs24", "handler.js", testenv.StreamHandlerNode},
	} {
		t.Run(fn.runtime, func(t *testing.T) {
			// One instance: /closes must reach the pod that served the stream.
			if _, err := c.CreateFunction(context.Background(), apiv1.Function{Name: fn.name, Runtime: fn.runtime, MaxReplicas: 1}); err != nil {
				t.Fatal(err)
			}
			f := deploy(t, c, fn.name, fn.runtime, map[string]string{fn.file: fn.code})
			waitFor(t, fn.name+" answering", 2*time.Minute, func() bool { code, _ := get(f.Status.URL + "/closes"); return code == 200 })
			testenv.CheckStreaming(t, f.Status.URL)
		})
	}
}
