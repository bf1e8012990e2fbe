package provider

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
)

// The provider checks at plan time only what apiv1 exports (single-field rules: names, entrypoint,
// runtimes, ranges). Everything else (a cron schedule, a function_ref that must exist, reserved env
// names) is the server's to check, once, at apply.

type stringCheck struct {
	desc  string
	check func(string) error
}

func (v stringCheck) Description(context.Context) string         { return v.desc }
func (v stringCheck) MarkdownDescription(context.Context) string { return v.desc }

func (v stringCheck) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		msg := err.Error()
		if ae, ok := err.(*apiv1.Error); ok {
			msg = ae.Message
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), msg)
	}
}

// nameValidator: DNS-1123 labels of at most 63 characters, as the API and Kubernetes require.
var nameValidator = stringCheck{fmt.Sprintf("a DNS-1123 label: lower-case letters, digits and '-', at most %d characters", apiv1.MaxNameLength),
	func(s string) error { return apiv1.ValidName("name", s) }}

var runtimeValidator = stringCheck{"a runtime: " + strings.Join(apiv1.Runtimes(), ", "), apiv1.ValidRuntime}

// runtimeLifecycleValidator warns at plan time of a runtime the catalog deprecates (or blocks by
// its date), naming the replacement: the lifecycle as this provider's apiv1 knows it. What an
// install blocks itself (--block-runtime) the server says at apply.
var runtimeLifecycleValidator validator.String = runtimeLifecycle{}

type runtimeLifecycle struct{}

func (runtimeLifecycle) Description(context.Context) string {
	return "warns of a deprecated runtime, naming its replacement"
}
func (r runtimeLifecycle) MarkdownDescription(ctx context.Context) string { return r.Description(ctx) }

func (runtimeLifecycle) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	rt, ok := apiv1.RuntimePolicy{}.Lookup(req.ConfigValue.ValueString())
	if !ok {
		return // runtimeValidator's error
	}
	move := "a supported runtime"
	if rt.Replacement != "" {
		move = fmt.Sprintf("%s (runtime = %q: an in-place update, the code rebuilt on it)", rt.Replacement, rt.Replacement)
	}
	switch rt.Status {
	case apiv1.RuntimeDeprecated:
		resp.Diagnostics.AddAttributeWarning(req.Path, "Deprecated runtime "+rt.Name,
			fmt.Sprintf("Runtime %s is deprecated since %s and will be blocked: move to %s.", rt.Name, rt.DeprecatedSince, move))
	case apiv1.RuntimeBlocked:
		resp.Diagnostics.AddAttributeWarning(req.Path, "Blocked runtime "+rt.Name,
			fmt.Sprintf("Runtime %s is blocked since %s: no new function may use it; functions on it keep running. Move to %s.", rt.Name, rt.BlockedSince, move))
	}
}

var entrypointValidator = stringCheck{"module.function (python) or file.export (node)", apiv1.ValidEntrypoint}

var memoryValidator = int64validator.Between(apiv1.MinMemoryMB, apiv1.MaxMemoryMB)

var timeoutValidator = int64validator.Between(apiv1.MinTimeoutSec, apiv1.MaxTimeoutSec)

// The scale ranges of apiv1.ValidScale, which also takes 0 for "the default" on the wire; in a
// configuration the default is leaving the attribute out, so 0 is refused where it is out of range.
// That max_replicas is at least min_replicas is the server's check (it needs both, defaults applied).
var (
	minReplicasValidator = int64validator.Between(0, apiv1.MaxReplicasLimit)
	maxReplicasValidator = int64validator.Between(1, apiv1.MaxReplicasLimit)
	concurrencyValidator = int64validator.Between(apiv1.MinConcurrency, apiv1.MaxConcurrency)
	idleTimeoutValidator = int64validator.Between(apiv1.MinIdleTimeoutSec, apiv1.MaxIdleTimeoutSec)
)

var jsonValidator = stringCheck{"JSON text", func(s string) error {
	if !jsonValid(s) {
		return fmt.Errorf("event_json is not valid JSON; use jsonencode(...)")
	}
	return nil
}}

// mapCheck checks a map of strings whose elements are known; an unknown element (from another
// resource's attribute) is checked by the server at apply.
type mapCheck struct {
	desc  string
	check func(map[string]string) error
}

func (v mapCheck) Description(context.Context) string         { return v.desc }
func (v mapCheck) MarkdownDescription(context.Context) string { return v.desc }

func (v mapCheck) ValidateMap(_ context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	m := map[string]string{}
	for k, e := range req.ConfigValue.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsUnknown() {
			return
		}
		m[k] = s.ValueString()
	}
	if err := v.check(m); err != nil {
		msg := err.Error()
		if ae, ok := err.(*apiv1.Error); ok {
			msg = ae.Message // names the key at fault, never a value
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), msg)
	}
}

// secretDataValidator: the API's limits on a secret's keys and values.
var secretDataValidator = mapCheck{fmt.Sprintf("keys as env names; values at most %d bytes, %d bytes in all", apiv1.MaxSecretValueBytes, apiv1.MaxSecretBytes),
	apiv1.ValidSecretData}

// secretEnvValidator: NAME → "secret/key". Names the runtime reserves are the server's to refuse
// (apiv1 does not export them); the platform's SLESS_ prefix is refused here.
var secretEnvValidator = mapCheck{"variable name → \"secret/key\"", func(m map[string]string) error {
	for _, k := range sortedKeys(m) {
		if err := apiv1.ValidSecretEnvName(k, func(string) bool { return false }); err != nil {
			return err
		}
		if _, _, err := apiv1.SplitSecretRef(m[k]); err != nil {
			return fmt.Errorf("secret_env %s: %s", k, err.(*apiv1.Error).Message)
		}
	}
	return nil
}}

// secretFilesValidator: "/var/run/secrets/<dir>" → a secret's name.
var secretFilesValidator = mapCheck{"a directory under " + apiv1.SecretFilesRoot + " → a secret's name", func(m map[string]string) error {
	if len(m) > apiv1.MaxSecretFiles {
		return fmt.Errorf("%d secret_files; at most %d", len(m), apiv1.MaxSecretFiles)
	}
	for _, p := range sortedKeys(m) {
		if err := apiv1.ValidSecretFilesPath(p); err != nil {
			return err
		}
		if err := apiv1.ValidName("secret", m[p]); err != nil {
			return fmt.Errorf("secret_files %s: %s", p, err.(*apiv1.Error).Message)
		}
	}
	return nil
}}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// urlSecretValidator: a rabbitmq trigger's url_secret is "secret/key". A value that looks like
// the URL itself is not echoed: it may hold the broker's password.
var urlSecretValidator = stringCheck{"\"secret/key\" naming the namespace secret's key that holds the broker URL", func(s string) error {
	if strings.Contains(s, "://") || strings.Contains(s, "@") {
		return fmt.Errorf("rabbitmq.url_secret must be \"secret/key\" naming a sless_secret's key that holds the broker URL, not the URL itself: the URL with its credentials never goes inline")
	}
	if _, _, err := apiv1.SplitSecretRef(s); err != nil {
		return fmt.Errorf("rabbitmq.url_secret: %s", err.(*apiv1.Error).Message)
	}
	return nil
}}
