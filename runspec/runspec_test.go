package runspec_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

func TestEnv(t *testing.T) {
	got := runspec.JobEnv(runspec.Instance{EnvVars: map[string]string{"B": "2", "A": "1"}, TimeoutSec: 10, Port: 9000, Host: "127.0.0.1"}, "")
	want := []runspec.EnvVar{{"A", "1"}, {"B", "2"}, {"PORT", "9000"}, {"TIMEOUT_SEC", "10"}, {"GRACE_SEC", "12"},
		{"HOST", "127.0.0.1"}, {"JOB_MODE", "1"}, {"EVENT_JSON", "{}"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JobEnv = %v, want %v", got, want)
	}
	got = runspec.Env(runspec.Instance{})
	want = []runspec.EnvVar{{"PORT", "8080"}, {"TIMEOUT_SEC", "1"}, {"GRACE_SEC", "3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Env of the zero Instance = %v, want %v", got, want)
	}
	for _, n := range []string{"PORT", "EVENT_JSON", "SLESS_CRON_JOB", "PYTHONPATH"} {
		if !runspec.Reserved(n) {
			t.Errorf("%s is not reserved", n)
		}
	}
	if runspec.Reserved("DATABASE_URL") {
		t.Error("DATABASE_URL is reserved")
	}
}

func TestCronEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.FixedZone("x", 3600))
	var ev map[string]string
	if err := json.Unmarshal([]byte(runspec.CronEvent("nightly", at)), &ev); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"source": "cron", "trigger": "nightly", "scheduled_time": "2026-12-01T08:30:00Z"}; !reflect.DeepEqual(ev, want) {
		t.Errorf("CronEvent = %v, want %v", ev, want)
	}
	if got := runspec.CronEvent("nightly", time.Time{}); got != `{"source":"cron","trigger":"nightly"}` {
		t.Errorf("CronEvent without a time = %s", got)
	}
}

func TestScheduledTimeOfJob(t *testing.T) {
	for _, tc := range []struct {
		job  string
		want string
	}{
		{"cron-nightly-29410020", "2025-12-01T15:00:00Z"},
		{"cron-a-b-1", "1970-01-01T00:01:00Z"},
		{"cron-nightly", ""},
		{"cron-nightly-x1", ""},
		{"", ""},
	} {
		got, ok := runspec.ScheduledTimeOfJob(tc.job)
		if (tc.want == "") == ok || (ok && got.Format(time.RFC3339) != tc.want) {
			t.Errorf("ScheduledTimeOfJob(%q) = %v %v, want %q", tc.job, got, ok, tc.want)
		}
	}
}

func TestDisabledBy(t *testing.T) {
	no, yes := false, true
	for _, tc := range []struct {
		name     string
		triggers []apiv1.Trigger
		off      bool
	}{
		{"no triggers", nil, false},
		{"one enabled", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerHTTP, FunctionRef: "f", Enabled: &yes}}, false},
		{"enabled by default", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerHTTP, FunctionRef: "f"}}, false},
		{"all disabled", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerHTTP, FunctionRef: "f", Enabled: &no}}, true},
		{"one of two enabled", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerHTTP, FunctionRef: "f", Enabled: &no},
			{Name: "b", Type: apiv1.TriggerHTTP, FunctionRef: "f"}}, false},
		{"cron does not count", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerCron, FunctionRef: "f", Enabled: &no}}, false},
		{"another function's", []apiv1.Trigger{{Name: "a", Type: apiv1.TriggerHTTP, FunctionRef: "g", Enabled: &no}}, false},
	} {
		if off, _ := runspec.DisabledBy(tc.triggers, "f"); off != tc.off {
			t.Errorf("%s: DisabledBy = %v, want %v", tc.name, off, tc.off)
		}
	}
}

func TestFunctionURL(t *testing.T) {
	if got := runspec.FunctionURL("https://api.example.com/", "sless-1", "hello"); got != "https://api.example.com/fn/sless-1/hello" {
		t.Errorf("FunctionURL = %s", got)
	}
}

func TestFunctionHost(t *testing.T) {
	const d = "fn.example.com"
	if h, ok := runspec.FunctionHost(d, "sless-0123456789abcdef", "my--fn"); !ok || h != "my--fn--sless-0123456789abcdef."+d {
		t.Errorf("%q %v", h, ok)
	}
	if ns, name, under, ok := runspec.SplitFunctionHost(d, "MY--FN--sless-0123456789abcdef.Fn.Example.com.:8443"); !under || !ok || ns != "sless-0123456789abcdef" || name != "my--fn" {
		t.Errorf("split: %q %q %v %v", ns, name, under, ok)
	}
	for _, bad := range []string{"x." + d, "--ns." + d, "fn--." + d, "a.fn--ns." + d, strings.Repeat("a", 60) + "--ns." + d} {
		if _, _, under, ok := runspec.SplitFunctionHost(d, bad); !under || ok {
			t.Errorf("%s: under %v ok %v", bad, under, ok)
		}
	}
	for _, other := range []string{d, "api.example.com", "evilfn.example.com", "x.fn.example.com.evil.org"} {
		if _, _, under, _ := runspec.SplitFunctionHost(d, other); under {
			t.Errorf("%s is not below %s", other, d)
		}
	}
	if _, ok := runspec.FunctionHost(d, "a--b", "fn"); ok {
		t.Error("a namespace with -- cannot be split back")
	}
	if _, ok := runspec.FunctionHost(d, "sless-0123456789abcdef", strings.Repeat("x", 40)); ok {
		t.Error("a 64-character label")
	}
}

// ShellEnv's file, sourced by a real /bin/sh, gives back every value byte for byte: quotes,
// newlines, $(…), backticks and globs are data, never run.
func TestShellEnvRoundTrip(t *testing.T) {
	vars := map[string]string{
		"PLAIN": "hello", "QUOTE": `it's "quoted" \ back`, "LINES": "a\nb\n\n", "EXPAND": "$(touch /tmp/pwned) `id` ${HOME} *",
		"EMPTY": "", "EVENT_JSON": `{"input":{"n":1},"s":"'; rm -rf / #"}`, "_u9": "x",
		"bad-name": "skipped", "9LEAD": "skipped", "NUL": "a\x00b",
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "env.sh")
	if err := os.WriteFile(file, runspec.ShellEnv(vars), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, want := range vars {
		out, err := exec.Command("/bin/sh", "-c", `. "$1" && printf '%s' "${2:+}" && eval "printf '%s' \"\${$2-UNSET}\""`, "sh", file, name).CombinedOutput()
		switch {
		case name == "bad-name":
			continue // not a variable name sh could hold
		case name == "9LEAD" || name == "NUL":
			if err == nil && string(out) != "UNSET" {
				t.Errorf("%s: %q was exported", name, out)
			}
			continue
		}
		if err != nil || string(out) != want {
			t.Errorf("%s: got %q (%v), want %q", name, out, err, want)
		}
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("a value was run")
	}
}
