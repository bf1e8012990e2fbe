package k8s_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sless-dev/sless/api/apiv1"
	apiclient "github.com/sless-dev/sless/api/client"
	"github.com/sless-dev/sless/internal/testenv"
)

// Each runtime issue 29 added runs on the cluster on the interpreter it names: the install built
// its runtime image (hack/k8s/install-sless.sh), the CRD takes its name, and each installs a small
// real dependency in a deps Job on that runtime's image — python3.13 a wheel from the cluster's
// pip index (pip of Python 3.13), nodejs22 and nodejs24 leftpad-sless from its npm mirror — which
// the handler answers from through /fn/.
func TestNewRuntimesOnKubernetes(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("runtimes"))
	whl, data := testenv.Wheel("rtpad", "1.0", "def pad(n, width):\n    return str(n).zfill(width)\n")
	cluster.PIP.Add("rtpad", whl, data)
	pj, lock := cluster.NPM.Manifests("fn", "leftpad-sless")
	nodeHandler := func(n string) string {
		return "const pad = require('leftpad-sless');\nexports.handle = async () => ({ version: process.version, padded: pad(" + n + ", 4) });\n"
	}
	for _, tc := range []struct {
		runtime, prefix, padded string
		files                   map[string]string
	}{
		{"python3.13", "3.13", "00313", map[string]string{"requirements.txt": "rtpad==1.0\n",
			"handler.py": "import sys\nimport rtpad\n\ndef handle(event):\n    return {'version': '%d.%d' % sys.version_info[:2], 'padded': rtpad.pad(313, 5)}\n"}},
		{"nodejs22", "v22.", "0022", map[string]string{"package.json": pj, "package-lock.json": lock, "handler.js": nodeHandler("22")}},
		{"nodejs24", "v24.", "0024", map[string]string{"package.json": pj, "package-lock.json": lock, "handler.js": nodeHandler("24")}},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			t.Parallel()
			name := "rt-" + strings.ReplaceAll(tc.runtime, ".", "-")
			f := deploy(t, c, name, tc.runtime, tc.files)
			code, body := get(f.Status.URL)
			var got struct{ Version, Padded string }
			if code != 200 || json.Unmarshal([]byte(body), &got) != nil || !strings.HasPrefix(got.Version, tc.prefix) {
				t.Fatalf("/fn/ on %s: %d %s, want version %s…", tc.runtime, code, body, tc.prefix)
			}
			if got.Padded != tc.padded || f.Status.Build == nil || f.Status.Build.DepsKey == "" {
				t.Errorf("the dependency on %s: %s (want padded %q), build %+v", tc.runtime, body, tc.padded, f.Status.Build)
			}
		})
	}
}

// The runtime lifecycle on the cluster, through the API client: GET /v1/runtimes lists the six
// runtimes with the install's images by digest and nodejs20 deprecated for nodejs22; a function
// created on nodejs20 is admitted with a `Warning: 299` naming nodejs22 (the client's warnings) and
// a Warning event in its …/events, and still deploys and serves; moving it to nodejs22 is one field
// of an update, which warns no more and serves on Node 22.
func TestRuntimeLifecycleOnKubernetes(t *testing.T) {
	t.Parallel()
	c := tenant(t, subject("lifecycle"))
	ctx := context.Background()

	rts, err := c.Runtimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := cluster.Kube.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-operator"}, &cm); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{apiv1.RuntimePython311: "RUNTIME_PYTHON", apiv1.RuntimeNodejs20: "RUNTIME_NODE", apiv1.RuntimePython313: "RUNTIME_PYTHON313",
		apiv1.RuntimeNodejs22: "RUNTIME_NODE22", apiv1.RuntimeNodejs24: "RUNTIME_NODE24", apiv1.RuntimeProvided: "RUNTIME_PROVIDED"}
	var names []string
	for _, r := range rts {
		names = append(names, r.Name)
		if !regexp.MustCompile(`/sless/runtime-`+regexp.QuoteMeta(r.Name)+`@sha256:[0-9a-f]{64}$`).MatchString(r.Image) || r.Image != cm.Data[keys[r.Name]] {
			t.Errorf("runtime %s: image %q, want the install's %s by digest (%q)", r.Name, r.Image, keys[r.Name], cm.Data[keys[r.Name]])
		}
		want := apiv1.RuntimeSupported
		if r.Name == apiv1.RuntimeNodejs20 {
			want = apiv1.RuntimeDeprecated
			if r.DeprecatedSince != "2026-04-30" || r.Replacement != apiv1.RuntimeNodejs22 {
				t.Errorf("nodejs20: %+v, want deprecated since 2026-04-30 for nodejs22", r)
			}
		}
		if r.Status != want {
			t.Errorf("runtime %s: status %q, want %q", r.Name, r.Status, want)
		}
	}
	slices.Sort(names)
	if want := []string{"nodejs20", "nodejs22", "nodejs24", "provided", "python3.11", "python3.13"}; !slices.Equal(names, want) {
		t.Fatalf("GET /v1/runtimes: %v, want %v", names, want)
	}

	// warned runs write with a handler of its own and returns the warnings it was told.
	warned := func(write func(ctx context.Context) error) []string {
		t.Helper()
		var mu sync.Mutex
		var got []string
		if err := write(apiclient.ContextWithWarningHandler(ctx, func(text string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, text)
		})); err != nil {
			t.Fatal(err)
		}
		return got
	}
	deprecationEvents := func() int {
		t.Helper()
		evs, err := c.ListEvents(ctx, "legacy")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == apiv1.EventWarning && e.Reason == apiv1.ReasonRuntimeDeprecated {
				if !strings.Contains(e.Message, "nodejs22") {
					t.Errorf("the deprecation event does not name nodejs22: %+v", e)
				}
				n++
			}
		}
		return n
	}

	ws := warned(func(ctx context.Context) error {
		_, err := c.CreateFunction(ctx, apiv1.Function{Name: "legacy", Runtime: apiv1.RuntimeNodejs20})
		return err
	})
	if len(ws) != 1 || !strings.Contains(ws[0], "nodejs20") || !strings.Contains(ws[0], "deprecated") || !strings.Contains(ws[0], "nodejs22") {
		t.Errorf("creating on nodejs20 warned %q, want one warning naming nodejs22", ws)
	}
	if n := deprecationEvents(); n == 0 {
		t.Error("no Warning event RuntimeDeprecated in the function's events after the create")
	}

	handler := map[string]string{"handler.js": "exports.handle = async () => ({ version: process.version });\n"}
	f := deploy(t, c, "legacy", apiv1.RuntimeNodejs20, handler)
	version := func() string {
		code, body := get(f.Status.URL)
		var got struct{ Version string }
		if code != 200 || json.Unmarshal([]byte(body), &got) != nil {
			return ""
		}
		return got.Version
	}
	if v := version(); !strings.HasPrefix(v, "v20.") {
		t.Fatalf("nodejs20 /fn/ answers version %q, want v20.…", v)
	}
	before := deprecationEvents()

	// One field changes: the runtime.
	cur, err := c.GetFunction(ctx, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	oldImage := cur.Status.Image
	cur.Runtime = apiv1.RuntimeNodejs22
	if ws := warned(func(ctx context.Context) error { _, err := c.UpdateFunction(ctx, *cur); return err }); len(ws) != 0 {
		t.Errorf("moving to nodejs22 warned %q", ws)
	}
	if after := deprecationEvents(); after != before {
		t.Errorf("moving to nodejs22 recorded a deprecation event (%d, before %d)", after, before)
	}
	waitFor(t, "legacy rebuilt on nodejs22 and Ready", 3*time.Minute, func() bool {
		g, err := c.GetFunction(ctx, "legacy")
		if err != nil {
			return false
		}
		if g.Status.Phase == apiv1.PhaseFailed {
			t.Fatalf("legacy on nodejs22: Failed: %s", g.Status.Message)
		}
		f = g
		return g.Runtime == apiv1.RuntimeNodejs22 && g.Status.Phase == apiv1.PhaseReady && g.Status.Image != "" && g.Status.Image != oldImage
	})
	// The rollout replaces the Node 20 pods: /fn/ answers from Node 22 once it is through.
	waitFor(t, "/fn/ answering from Node 22", 2*time.Minute, func() bool { return strings.HasPrefix(version(), "v22.") })
	if ws := warned(func(ctx context.Context) error { _, err := c.GetFunction(ctx, "legacy"); return err }); len(ws) != 0 {
		t.Errorf("reading the function on nodejs22 warned %q", ws)
	}
}
