package main_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// binDir holds the binaries the tests build (binaries), removed when they end.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sless-operator-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
	buildOut  []byte
)

// binaries builds sless-operator and sless once per test binary and returns their paths.
func binaries(t *testing.T) (operator, sless string) {
	t.Helper()
	buildOnce.Do(func() {
		for _, b := range []struct{ out, pkg string }{{"sless-operator", "."}, {"sless", "../sless"}} {
			if buildOut, buildErr = exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg).CombinedOutput(); buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("building: %v\n%s", buildErr, buildOut)
	}
	return filepath.Join(binDir, "sless-operator"), filepath.Join(binDir, "sless")
}

// flagLine is a line of cobra's flag list: "  -h, --name type   usage (default …)".
var flagLine = regexp.MustCompile(`^\s+(?:-[A-Za-z], )?--([a-z0-9-]+)( [^ ]+)?\s+(.*)$`)

// helpFlags reads the flags of a --help output: name → type and usage (with its default), the
// padding between them left out (it depends on the longest name in the set).
func helpFlags(t *testing.T, bin string, args ...string) map[string]string {
	t.Helper()
	out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v --help: %v\n%s", filepath.Base(bin), args, err, out)
	}
	flags := map[string]string{}
	in := false
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		line := sc.Text()
		switch {
		case line == "Flags:":
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("%s: not a flag line: %q", filepath.Base(bin), line)
			}
			flags[m[1]] = strings.TrimSpace(m[2]) + " | " + m[3]
		}
	}
	if len(flags) < 10 {
		t.Fatalf("%s %v --help lists %d flags:\n%s", filepath.Base(bin), args, len(flags), out)
	}
	return flags
}

// pflag reads one dash as shorthand flags: `-role api` (which the standard library's flag package
// took) is refused, not misread.
func TestSingleDashLongFlagsAreRefused(t *testing.T) {
	operator, _ := binaries(t)
	out, err := exec.Command(operator, "-role", "api").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown shorthand flag: 'r' in -role") {
		t.Errorf("-role api: %v\n%s", err, out)
	}
}
