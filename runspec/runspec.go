package runspec

import (
	"encoding/json"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
)

const (
	// Port is where every runtime listens unless told otherwise (PORT).
	Port = 8080
	// UID and GID of every function process; the images declare User "65532:65532" (numeric, so
	// Kubernetes' runAsNonRoot can check it).
	UID = 65532
	GID = 65532
	// MaxResultBytes bounds a job's result (the termination message on Kubernetes).
	MaxResultBytes = 4096
	// HealthPath answers 200 once the handler is loaded.
	HealthPath = "/health"
)

// Labels on everything sless runs: pods, Jobs, Services (Kubernetes) and podman containers.
const (
	LabelFunction = "sless.dev/function"
	LabelRole     = "sless.dev/role"
	// LabelNamespace, LabelInstance, LabelPort and LabelJob are the single host's: podman has no
	// namespaces, several `sless up` may share one podman storage, and an instance's port and a
	// job's name are read back from its container after a restart.
	LabelNamespace = "sless.dev/namespace"
	LabelInstance  = "sless.dev/instance"
	LabelPort      = "sless.dev/port"
	LabelJob       = "sless.dev/job"
	// LabelManagedBy marks Kubernetes objects the operator made (and the tenants' namespaces).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "sless-operator"
	// LabelTenantSecret ("true") marks a tenant's own Secret on Kubernetes: the only Secrets the
	// API's account may create or replace (operator/config/rbac/admission.yaml).
	LabelTenantSecret = "sless.dev/tenant-secret"
)

// Role is what an instance runs for.
type Role string

// Roles.
const (
	RoleFunction Role = "function" // serves /fn/
	RoleJob      Role = "job"      // one run of a job
	RoleCron     Role = "cron"     // one run of a cron trigger
	RoleDeps     Role = "deps"     // a dependency install
	// RoleConsumer is a namespace's rabbitmq consumer (Kubernetes): platform code, not the
	// tenant's, under the namespace's egress rules.
	RoleConsumer Role = "consumer"
)

// Labels of a function's instances and runs in role r.
func Labels(function string, r Role) map[string]string {
	return map[string]string{LabelFunction: function, LabelRole: string(r)}
}

// Environment variable names of the contract (runtimes/README.md).
const (
	EnvPort           = "PORT"
	EnvHost           = "HOST"
	EnvTimeoutSec     = "TIMEOUT_SEC"
	EnvGraceSec       = "GRACE_SEC"
	EnvJobMode        = "JOB_MODE"
	EnvEventJSON      = "EVENT_JSON"
	EnvTerminationLog = "TERMINATION_LOG"
	// EnvCronJob carries the name of the Kubernetes Job a CronJob made for one run, "<cronjob>-<minutes
	// since the epoch of the scheduled time>". A CronJob's template cannot hold the scheduled time, so
	// the runtime fills the event's scheduled_time from it (see CronEvent).
	EnvCronJob = "SLESS_CRON_JOB"
	// EnvFile names a JSON object {"NAME": "value"} the runtime adds to its environment before it
	// reads any of it: how the single host hands over the user's env vars and a job's event
	// without putting them on a command line (podman's arguments are visible to every process of
	// the host).
	EnvFile = "SLESS_ENV_FILE"
	// EnvShellFile names the same variables as EnvFile in a POSIX shell file of `export NAME='value'`
	// lines: what the provided runtime's /bin/sh sources before it execs the upload's bootstrap, so
	// a bootstrap in any language gets them as ordinary environment variables.
	EnvShellFile = "SLESS_ENV_SH"
)

// reserved are set by the platform or the runtime image; a user's value would break the runtime.
var reserved = map[string]bool{"HANDLER": true, EnvPort: true, EnvHost: true, "FUNCTION_DIR": true,
	EnvTimeoutSec: true, "MAX_BODY_BYTES": true, EnvGraceSec: true, EnvJobMode: true, EnvEventJSON: true,
	EnvTerminationLog: true, EnvCronJob: true, EnvFile: true, EnvShellFile: true, "PYTHONPATH": true, "NODE_PATH": true}

// Reserved reports whether name is set by the platform, so a user may not set it.
func Reserved(name string) bool { return reserved[name] }

// Private reports whether a variable of Env or JobEnv carries what the user gave (their env vars,
// a job's event) rather than the platform's settings: what must not appear on a command line.
func Private(name string) bool { return !reserved[name] || name == EnvEventJSON }

// EnvVar is one variable, in the order Env returns them.
type EnvVar struct{ Name, Value string }

// Instance is what an instance's environment depends on.
type Instance struct {
	// EnvVars are the user's variables.
	EnvVars map[string]string
	// TimeoutSec bounds one invocation; it also sets how long a stopping instance finishes its
	// requests (GRACE_SEC).
	TimeoutSec int
	// Port and Host are where the runtime listens. The defaults are Port and every interface.
	Port int
	Host string
}

// Env is what a function instance gets at run time (never baked into the image): the user's
// variables sorted by name, then the platform's.
func Env(in Instance) []EnvVar {
	keys := make([]string, 0, len(in.EnvVars))
	for k := range in.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]EnvVar, 0, len(keys)+4)
	for _, k := range keys {
		out = append(out, EnvVar{k, in.EnvVars[k]})
	}
	port := in.Port
	if port == 0 {
		port = Port
	}
	timeout := max(in.TimeoutSec, 1)
	out = append(out, EnvVar{EnvPort, strconv.Itoa(port)}, EnvVar{EnvTimeoutSec, strconv.Itoa(timeout)},
		EnvVar{EnvGraceSec, strconv.Itoa(GraceSec(in.TimeoutSec))})
	if in.Host != "" {
		out = append(out, EnvVar{EnvHost, in.Host})
	}
	return out
}

// GraceSec is how long a stopping instance keeps finishing its requests: the invocation timeout
// and two seconds to write the answers.
func GraceSec(timeoutSec int) int { return max(timeoutSec, 1) + 2 }

// JobEnv is what one job or cron run gets: Env plus job mode and the event (JSON text; "" is {}).
func JobEnv(in Instance, event string) []EnvVar {
	if event == "" {
		event = "{}"
	}
	return append(Env(in), EnvVar{EnvJobMode, "1"}, EnvVar{EnvEventJSON, event})
}

// CronEvent is the event of one cron run: {"source":"cron","trigger":…,"scheduled_time":…}. With a
// zero time the scheduled_time is left out, for the runtime to fill from EnvCronJob (Kubernetes).
func CronEvent(trigger string, scheduled time.Time) string {
	ev := map[string]string{"source": "cron", "trigger": trigger}
	if !scheduled.IsZero() {
		ev["scheduled_time"] = scheduled.UTC().Format(time.RFC3339)
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// ScheduledTimeOfJob is the scheduled time a CronJob encodes in the name of the Job it makes for
// one run ("<cronjob>-<minutes since the epoch>"), what the runtimes compute from EnvCronJob.
func ScheduledTimeOfJob(job string) (time.Time, bool) {
	i := strings.LastIndexByte(job, '-')
	if i < 0 {
		return time.Time{}, false
	}
	m, err := strconv.ParseInt(job[i+1:], 10, 64)
	if err != nil || m <= 0 {
		return time.Time{}, false
	}
	return time.Unix(m*60, 0).UTC(), true
}

// DisabledBy says whether a function is switched off by its http triggers (it has at least one and
// none is enabled) and names them. Both backends scale by this rule and /fn/ answers 503 by it.
func DisabledBy(triggers []apiv1.Trigger, function string) (bool, []string) {
	var names []string
	for _, t := range triggers {
		if t.FunctionRef != function || t.Type != apiv1.TriggerHTTP {
			continue
		}
		if t.IsEnabled() {
			return false, nil
		}
		names = append(names, t.Name)
	}
	return len(names) > 0, names
}

// FunctionPath is a function's path on the API's address: /fn/{namespace}/{name}.
func FunctionPath(ns, name string) string { return "/fn/" + ns + "/" + name }

// FunctionURL is a function's public URL under the API's base URL.
func FunctionURL(base, ns, name string) string {
	return strings.TrimRight(base, "/") + FunctionPath(ns, name)
}

// FunctionHost is a function's own host name under domain (`--fn-domain`): "<name>--<ns>.<domain>",
// the Lambda-URL model, which gives each function its own browser origin. ok is false when the
// function has none: the label would exceed 63 characters (DNS), or the namespace contains "--"
// (a host is split at its last "--", so such a namespace could not be told apart).
func FunctionHost(domain, ns, name string) (host string, ok bool) {
	label := name + "--" + ns
	if domain == "" || len(label) > 63 || strings.Contains(ns, "--") {
		return "", false
	}
	return label + "." + domain, true
}

// SplitFunctionHost is FunctionHost's inverse: host (any case, an optional port and trailing dot)
// is "<name>--<ns>.<domain>". under is true for every host below domain, also when it names no
// function: such a host never serves the API.
func SplitFunctionHost(domain, host string) (ns, name string, under, ok bool) {
	if domain == "" {
		return "", "", false, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, found := strings.CutSuffix(host, "."+strings.ToLower(strings.TrimSuffix(domain, ".")))
	if !found {
		return "", "", false, false
	}
	i := strings.LastIndex(label, "--")
	if i <= 0 || i+2 >= len(label) || len(label) > 63 || strings.Contains(label, ".") {
		return "", "", true, false
	}
	return label[i+2:], label[:i], true, true
}

// ShellEnv renders vars as a POSIX shell file of `export NAME='value'` lines (EnvShellFile), sorted
// by name. Values are single-quoted (a quote inside is closed, escaped and reopened), so no value
// is ever expanded or run; a name that is not a shell identifier (the API admits none) is left
// out, and so is a value holding a NUL byte, which no environment can carry.
func ShellEnv(vars map[string]string) []byte {
	names := make([]string, 0, len(vars))
	for k := range vars {
		if shellName(k) && !strings.ContainsRune(vars[k], 0) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		b.WriteString("export " + k + "='" + strings.ReplaceAll(vars[k], "'", `'\''`) + "'\n")
	}
	return []byte(b.String())
}

func shellName(k string) bool {
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return k != ""
}
