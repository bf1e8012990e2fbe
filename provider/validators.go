package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/robfig/cron/v3"

	"github.com/sless-dev/sless/runtimes"
)

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

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
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), err.Error())
	}
}

// nameValidator: DNS-1123 labels of at most 63 characters, as the API and Kubernetes require.
var nameValidator = stringCheck{"a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters", func(s string) error {
	if len(s) > 63 || !dns1123.MatchString(s) {
		return fmt.Errorf("%q is not a valid name: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", s)
	}
	return nil
}}

var runtimeValidator = stringCheck{"a runtime: " + strings.Join(runtimes.Names(), ", "), func(s string) error {
	if _, ok := runtimes.Lookup(s); !ok {
		return fmt.Errorf("runtime %q is not supported; choose one of %s", s, strings.Join(runtimes.Names(), ", "))
	}
	return nil
}}

var cronValidator = stringCheck{"a 5-field cron expression", func(s string) error {
	if _, err := cron.ParseStandard(s); err != nil || strings.HasPrefix(strings.TrimSpace(s), "@every") {
		return fmt.Errorf("schedule %q is not a 5-field cron expression (minute hour day-of-month month day-of-week): %v", s, err)
	}
	return nil
}}

var jsonValidator = stringCheck{"JSON text", func(s string) error {
	if !jsonValid(s) {
		return fmt.Errorf("event_json is not valid JSON; use jsonencode(...)")
	}
	return nil
}}
