package build_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/sless-dev/sless/build"
)

// A finished build moves the build and dependency families; /metrics stays promlint-clean.
func TestMetrics(t *testing.T) {
	m := build.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Observe(build.Observation{Result: "succeeded", Duration: 1500 * time.Millisecond, Runtime: "python3.11", Dependencies: "cached"})
	m.Observe(build.Observation{Result: "failed", Duration: time.Second, Runtime: "python3.11", Dependencies: "failed"})
	m.Observe(build.Observation{Result: "succeeded", Duration: time.Second, Runtime: "nodejs20"})
	for name, want := range map[string]string{
		"sless_builds_total": `
# HELP sless_builds_total Function builds by result (succeeded, failed).
# TYPE sless_builds_total counter
sless_builds_total{result="failed"} 1
sless_builds_total{result="succeeded"} 2
`,
		"sless_dependency_cache_hits_total": `
# HELP sless_dependency_cache_hits_total Builds whose dependency layer was in the cache already, by runtime.
# TYPE sless_dependency_cache_hits_total counter
sless_dependency_cache_hits_total{runtime="python3.11"} 1
`,
		"sless_dependency_installs_total": `
# HELP sless_dependency_installs_total Dependency installs a build waited for, by runtime and result (succeeded, failed).
# TYPE sless_dependency_installs_total counter
sless_dependency_installs_total{result="failed",runtime="python3.11"} 1
`,
	} {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), name); err != nil {
			t.Error(err)
		}
	}
	var out bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) != 0 {
		t.Errorf("promlint: %v %+v %s", err, problems, out.String())
	}
}
