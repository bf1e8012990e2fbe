package api_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sless-dev/sless/internal/testenv"
)

// The Grafana dashboard in docs/ names only metrics sless exports: every sless_* family in its
// queries is defined in the code (a rename that forgets the dashboard fails here).
func TestDashboardNamesExportedMetrics(t *testing.T) {
	root := testenv.ModuleRoot()
	dash, err := os.ReadFile(filepath.Join(root, "docs", "grafana", "sless-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			code.Write(b)
		}
		return nil
	})
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`sless_[a-z_]+`).FindAllString(string(dash), -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if n, ok := strings.CutSuffix(m, suffix); ok && strings.Contains(code.String(), `"`+n+`"`) {
				m = n
			}
		}
		names[m] = true
	}
	if len(names) < 15 {
		t.Fatalf("the dashboard names only %v", names)
	}
	for n := range names {
		if !strings.Contains(code.String(), `"`+n+`"`) {
			t.Errorf("the dashboard queries %s, which no code defines", n)
		}
	}
}
