package api

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"

	"github.com/robfig/cron/v3"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/oci"
	"github.com/sless-dev/sless/runtimes"
)

// Documented ranges and defaults of a function's spec.
const (
	MinMemoryMB, MaxMemoryMB, DefaultMemoryMB       = 64, 8192, 128
	MinTimeoutSec, MaxTimeoutSec, DefaultTimeoutSec = 1, 900, 30
	MaxEnvVars                                      = 128
	MaxEnvBytes                                     = 64 << 10
	MaxEventJSONBytes                               = 64 << 10
)

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// reservedEnv are set by the platform at run time; a user's value would break the runtime.
	reservedEnv = map[string]bool{"HANDLER": true, "PORT": true, "HOST": true, "FUNCTION_DIR": true,
		"TIMEOUT_SEC": true, "MAX_BODY_BYTES": true, "GRACE_SEC": true, "JOB_MODE": true, "EVENT_JSON": true,
		"TERMINATION_LOG": true, "PYTHONPATH": true, "NODE_PATH": true}
)

func invalid(format string, args ...any) error {
	return apiv1.Errorf(apiv1.CodeInvalidArgument, format, args...)
}

// ValidName checks a DNS-1123 label of at most 63 characters, as Kubernetes names require.
func ValidName(kind, name string) error {
	if len(name) > 63 || !dns1123Label.MatchString(name) {
		return invalid("%s name %q is invalid: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", kind, name)
	}
	return nil
}

// ValidateFunction checks a function spec and fills in defaults.
func ValidateFunction(f *apiv1.Function) error {
	if err := ValidName("function", f.Name); err != nil {
		return err
	}
	rt, ok := runtimes.Lookup(f.Runtime)
	if !ok {
		return invalid("runtime %q is not supported; choose one of %s", f.Runtime, strings.Join(runtimes.Names(), ", "))
	}
	if f.Entrypoint == "" {
		f.Entrypoint = rt.DefaultHandler
	}
	if !oci.ValidHandler(f.Entrypoint) {
		return invalid("entrypoint %q must look like module.function (python) or file.export (node)", f.Entrypoint)
	}
	if f.MemoryMB == 0 {
		f.MemoryMB = DefaultMemoryMB
	}
	if f.MemoryMB < MinMemoryMB || f.MemoryMB > MaxMemoryMB {
		return invalid("memory_mb %d is outside %d–%d", f.MemoryMB, MinMemoryMB, MaxMemoryMB)
	}
	if f.TimeoutSec == 0 {
		f.TimeoutSec = DefaultTimeoutSec
	}
	if f.TimeoutSec < MinTimeoutSec || f.TimeoutSec > MaxTimeoutSec {
		return invalid("timeout_sec %d is outside %d–%d", f.TimeoutSec, MinTimeoutSec, MaxTimeoutSec)
	}
	if len(f.EnvVars) > MaxEnvVars {
		return invalid("%d env_vars; at most %d", len(f.EnvVars), MaxEnvVars)
	}
	size := 0
	keys := make([]string, 0, len(f.EnvVars))
	for k := range f.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !envName.MatchString(k) {
			return invalid("env_vars name %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if reservedEnv[k] {
			return invalid("env_vars name %q is set by the platform and cannot be overridden", k)
		}
		if strings.IndexByte(f.EnvVars[k], 0) >= 0 {
			return invalid("env_vars %q contains a NUL byte", k)
		}
		size += len(k) + len(f.EnvVars[k])
	}
	if size > MaxEnvBytes {
		return invalid("env_vars total %d bytes; at most %d", size, MaxEnvBytes)
	}
	return nil
}

// ValidateTrigger checks a trigger spec and fills in defaults.
func ValidateTrigger(t *apiv1.Trigger) error {
	if err := ValidName("trigger", t.Name); err != nil {
		return err
	}
	if err := ValidName("function_ref", t.FunctionRef); err != nil {
		return err
	}
	switch t.Type {
	case apiv1.TriggerHTTP:
		if t.Schedule != "" {
			return invalid("an http trigger has no schedule (got %q)", t.Schedule)
		}
	case apiv1.TriggerCron:
		if _, err := cron.ParseStandard(t.Schedule); err != nil || strings.HasPrefix(strings.TrimSpace(t.Schedule), "@every") {
			return invalid("schedule %q is not a 5-field cron expression (minute hour day-of-month month day-of-week): %v", t.Schedule, err)
		}
	default:
		return invalid("type %q must be %q or %q", t.Type, apiv1.TriggerHTTP, apiv1.TriggerCron)
	}
	if t.Enabled == nil {
		yes := true
		t.Enabled = &yes
	}
	return nil
}

// ValidateJob checks a job spec.
func ValidateJob(j *apiv1.Job) error {
	if err := ValidName("job", j.Name); err != nil {
		return err
	}
	if err := ValidName("function_ref", j.FunctionRef); err != nil {
		return err
	}
	if j.RunID < 0 {
		return invalid("run_id %d must be 0 (do not run) or positive", j.RunID)
	}
	if len(j.EventJSON) > MaxEventJSONBytes {
		return invalid("event_json is %d bytes; at most %d", len(j.EventJSON), MaxEventJSONBytes)
	}
	if j.EventJSON != "" && !json.Valid([]byte(j.EventJSON)) {
		return invalid("event_json is not valid JSON")
	}
	return nil
}

// DisabledBy says whether a function is switched off by its http triggers (DESIGN.md §5: it has at
// least one and none is enabled) and names them. Both backends scale by this rule.
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
