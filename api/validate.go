package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/robfig/cron/v3"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/objects"
	"github.com/sless-dev/sless/runspec"
)

func invalid(format string, args ...any) error {
	return apiv1.Errorf(apiv1.CodeInvalidArgument, format, args...)
}

// ValidateFunction checks a function as a client sent it and returns the spec to store, defaults
// filled in. The rules on single fields are apiv1's; what needs more than one field, or the
// platform's run contract, is checked here.
func ValidateFunction(f apiv1.Function) (objects.FunctionSpec, error) {
	spec := objects.FunctionSpec{Name: f.Name, Runtime: f.Runtime, Entrypoint: f.Entrypoint, MemoryMB: f.MemoryMB, TimeoutSec: f.TimeoutSec, EnvVars: f.EnvVars,
		MinReplicas: f.MinReplicas, MaxReplicas: f.MaxReplicas, Concurrency: f.Concurrency, IdleTimeoutSec: f.IdleTimeoutSec}
	if err := apiv1.ValidName("function", f.Name); err != nil {
		return spec, err
	}
	if err := apiv1.ValidRuntime(f.Runtime); err != nil {
		return spec, err
	}
	if spec.Entrypoint == "" {
		spec.Entrypoint = apiv1.DefaultEntrypoint
	}
	if err := apiv1.ValidEntrypoint(spec.Entrypoint); err != nil {
		return spec, err
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = apiv1.DefaultMemoryMB
	}
	if err := apiv1.ValidMemoryMB(spec.MemoryMB); err != nil {
		return spec, err
	}
	if spec.TimeoutSec == 0 {
		spec.TimeoutSec = apiv1.DefaultTimeoutSec
	}
	if err := apiv1.ValidTimeoutSec(spec.TimeoutSec); err != nil {
		return spec, err
	}
	if err := apiv1.ValidScale(spec.MinReplicas, spec.MaxReplicas, spec.Concurrency, spec.IdleTimeoutSec); err != nil {
		return spec, err
	}
	spec = spec.WithScaleDefaults()
	if spec.MaxReplicas < spec.MinReplicas {
		return spec, invalid("max_replicas %d is below min_replicas %d", spec.MaxReplicas, spec.MinReplicas)
	}
	if len(f.EnvVars) > apiv1.MaxEnvVars {
		return spec, invalid("%d env_vars; at most %d", len(f.EnvVars), apiv1.MaxEnvVars)
	}
	size := 0
	keys := make([]string, 0, len(f.EnvVars))
	for k := range f.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := apiv1.ValidEnvName(k); err != nil {
			return spec, err
		}
		if runspec.Reserved(k) {
			return spec, invalid("env_vars name %q is set by the platform and cannot be overridden", k)
		}
		if strings.IndexByte(f.EnvVars[k], 0) >= 0 {
			return spec, invalid("env_vars %q contains a NUL byte", k)
		}
		size += len(k) + len(f.EnvVars[k])
	}
	if size > apiv1.MaxEnvBytes {
		return spec, invalid("env_vars total %d bytes; at most %d", size, apiv1.MaxEnvBytes)
	}
	if len(spec.EnvVars) == 0 {
		spec.EnvVars = nil
	}
	if err := validSecretRefs(f); err != nil {
		return spec, err
	}
	spec.SecretEnv, spec.SecretFiles = f.SecretEnv, f.SecretFiles
	if len(spec.SecretEnv) == 0 {
		spec.SecretEnv = nil
	}
	if len(spec.SecretFiles) == 0 {
		spec.SecretFiles = nil
	}
	if f.Async != nil {
		a := f.Async.WithDefaults()
		if err := a.Validate(); err != nil {
			return spec, err
		}
		spec.Async = &a
	}
	return spec, nil
}

// validSecretRefs checks secret_env and secret_files: names of variables no one else sets,
// references of the form secret/key, directories under /var/run/secrets/ none inside another.
// Whether the secrets exist is the start's question (a function may be declared before its
// secret).
func validSecretRefs(f apiv1.Function) error {
	if len(f.EnvVars)+len(f.SecretEnv) > apiv1.MaxEnvVars {
		return invalid("%d env_vars and secret_env together; at most %d", len(f.EnvVars)+len(f.SecretEnv), apiv1.MaxEnvVars)
	}
	names := make([]string, 0, len(f.SecretEnv))
	for k := range f.SecretEnv {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := apiv1.ValidSecretEnvName(k, runspec.Reserved); err != nil {
			return err
		}
		if _, ok := f.EnvVars[k]; ok {
			return invalid("%q is in both env_vars and secret_env; a variable takes its value from one", k)
		}
		if _, _, err := apiv1.SplitSecretRef(f.SecretEnv[k]); err != nil {
			return invalid("secret_env %s: %v", k, err.(*apiv1.Error).Message)
		}
	}
	if len(f.SecretFiles) > apiv1.MaxSecretFiles {
		return invalid("%d secret_files; at most %d", len(f.SecretFiles), apiv1.MaxSecretFiles)
	}
	paths := make([]string, 0, len(f.SecretFiles))
	for p := range f.SecretFiles {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		if err := apiv1.ValidSecretFilesPath(p); err != nil {
			return err
		}
		if err := apiv1.ValidName("secret", f.SecretFiles[p]); err != nil {
			return invalid("secret_files %s: %v", p, err.(*apiv1.Error).Message)
		}
		// Sorted, a directory comes right before those inside it.
		if i > 0 && strings.HasPrefix(p, paths[i-1]+"/") {
			return invalid("secret_files %s is inside %s; mount each secret in a directory of its own", p, paths[i-1])
		}
	}
	return nil
}

// ValidateTrigger checks a trigger and returns the spec to store, defaults filled in.
func ValidateTrigger(t apiv1.Trigger) (objects.TriggerSpec, error) {
	spec := objects.TriggerSpec{Name: t.Name, Type: t.Type, FunctionRef: t.FunctionRef, Schedule: t.Schedule, Enabled: t.Enabled}
	if t.RabbitMQ != nil && t.Type != apiv1.TriggerRabbitMQ {
		return spec, invalid("only a rabbitmq trigger has a rabbitmq block (type is %q)", t.Type)
	}
	if err := apiv1.ValidName("trigger", t.Name); err != nil {
		return spec, err
	}
	if err := apiv1.ValidName("function_ref", t.FunctionRef); err != nil {
		return spec, err
	}
	switch t.Type {
	case apiv1.TriggerHTTP:
		if t.Schedule != "" {
			return spec, invalid("an http trigger has no schedule (got %q)", t.Schedule)
		}
	case apiv1.TriggerCron:
		if _, err := cron.ParseStandard(t.Schedule); err != nil || strings.HasPrefix(strings.TrimSpace(t.Schedule), "@every") {
			return spec, invalid("schedule %q is not a 5-field cron expression (minute hour day-of-month month day-of-week): %v", t.Schedule, err)
		}
	case apiv1.TriggerRabbitMQ:
		if t.Schedule != "" {
			return spec, invalid("a rabbitmq trigger has no schedule (got %q)", t.Schedule)
		}
		mq, err := validateRabbitMQ(t.RabbitMQ)
		if err != nil {
			return spec, err
		}
		spec.RabbitMQ = mq
	default:
		return spec, invalid("type %q must be %q, %q or %q", t.Type, apiv1.TriggerHTTP, apiv1.TriggerCron, apiv1.TriggerRabbitMQ)
	}
	if spec.Enabled == nil {
		yes := true
		spec.Enabled = &yes
	}
	return spec, nil
}

// validateRabbitMQ checks a rabbitmq trigger's block and fills in its defaults.
func validateRabbitMQ(in *apiv1.RabbitMQTrigger) (*apiv1.RabbitMQTrigger, error) {
	if in == nil {
		return nil, invalid("a rabbitmq trigger needs a rabbitmq block with url_secret and queue")
	}
	mq := *in
	if _, _, err := apiv1.SplitSecretRef(mq.URLSecret); err != nil {
		return nil, invalid("rabbitmq.url_secret %q must be SECRET/KEY: the broker URL comes from a namespace secret, never inline", redactURL(mq.URLSecret))
	}
	if mq.DeadLetter == "" {
		mq.DeadLetter = mq.Queue + apiv1.DeadLetterSuffix
	}
	for _, q := range []struct{ field, name string }{{"queue", mq.Queue}, {"dead_letter", mq.DeadLetter}} {
		if err := validQueueName(q.name); err != nil {
			return nil, invalid("rabbitmq.%s %q: %v", q.field, q.name, err)
		}
	}
	if mq.DeadLetter == mq.Queue {
		return nil, invalid("rabbitmq.dead_letter is the queue itself (%q): a failed message would come back for ever", mq.Queue)
	}
	mq.Prefetch = cmp.Or(mq.Prefetch, apiv1.DefaultPrefetch)
	if mq.Prefetch < 1 || mq.Prefetch > apiv1.MaxPrefetch {
		return nil, invalid("rabbitmq.prefetch %d must be 1 to %d", mq.Prefetch, apiv1.MaxPrefetch)
	}
	if mq.MaxRetries == nil {
		n := apiv1.DefaultMaxRetries
		mq.MaxRetries = &n
	}
	if *mq.MaxRetries < 0 || *mq.MaxRetries > apiv1.MaxMaxRetries {
		return nil, invalid("rabbitmq.max_retries %d must be 0 to %d", *mq.MaxRetries, apiv1.MaxMaxRetries)
	}
	mq.RetryBackoffMS = cmp.Or(mq.RetryBackoffMS, apiv1.DefaultRetryBackoffMS)
	if mq.RetryBackoffMS < 1 || mq.RetryBackoffMS > apiv1.MaxRetryBackoffMS {
		return nil, invalid("rabbitmq.retry_backoff_ms %d must be 1 to %d", mq.RetryBackoffMS, apiv1.MaxRetryBackoffMS)
	}
	return &mq, nil
}

// validQueueName is RabbitMQ's rule for a queue a client names: 1 to 255 bytes of UTF-8, not
// starting with "amq." (reserved for the broker); control characters are refused too (they end
// up in logs and headers).
func validQueueName(q string) error {
	switch {
	case q == "":
		return errors.New("is empty")
	case len(q) > 255:
		return fmt.Errorf("is %d bytes; at most 255", len(q))
	case !utf8.ValidString(q):
		return errors.New("is not UTF-8")
	case strings.HasPrefix(q, "amq."):
		return errors.New(`starts with "amq.", which the broker reserves`)
	case strings.ContainsFunc(q, unicode.IsControl):
		return errors.New("holds a control character")
	}
	return nil
}

// redactURL keeps a URL given where a secret reference belongs out of the answer: it may hold
// the broker's password.
func redactURL(s string) string {
	if strings.Contains(s, "://") || strings.Contains(s, "@") {
		return "<a URL>"
	}
	return s
}

// ValidateJob checks a job and returns the spec to store.
func ValidateJob(j apiv1.Job) (objects.JobSpec, error) {
	spec := objects.JobSpec{Name: j.Name, FunctionRef: j.FunctionRef, EventJSON: j.EventJSON, RunID: j.RunID}
	if err := apiv1.ValidName("job", j.Name); err != nil {
		return spec, err
	}
	if err := apiv1.ValidName("function_ref", j.FunctionRef); err != nil {
		return spec, err
	}
	if j.RunID < 0 {
		return spec, invalid("run_id %d must be 0 (do not run) or positive", j.RunID)
	}
	if len(j.EventJSON) > apiv1.MaxEventJSONBytes {
		return spec, invalid("event_json is %d bytes; at most %d", len(j.EventJSON), apiv1.MaxEventJSONBytes)
	}
	if j.EventJSON != "" && !json.Valid([]byte(j.EventJSON)) {
		return spec, invalid("event_json is not valid JSON")
	}
	return spec, nil
}
