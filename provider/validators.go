package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

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

var entrypointValidator = stringCheck{"module.function (python) or file.export (node)", apiv1.ValidEntrypoint}

var memoryValidator = int64validator.Between(apiv1.MinMemoryMB, apiv1.MaxMemoryMB)

var timeoutValidator = int64validator.Between(apiv1.MinTimeoutSec, apiv1.MaxTimeoutSec)

var jsonValidator = stringCheck{"JSON text", func(s string) error {
	if !jsonValid(s) {
		return fmt.Errorf("event_json is not valid JSON; use jsonencode(...)")
	}
	return nil
}}
