package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                = (*TriggerResource)(nil)
	_ resource.ResourceWithImportState = (*TriggerResource)(nil)
)

// NewTriggerResource is sless_trigger.
func NewTriggerResource() resource.Resource { return &TriggerResource{} }

// TriggerResource is an http or cron trigger. Only enabled changes in place.
type TriggerResource struct{ c *client.Client }

type triggerModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	FunctionRef types.String `tfsdk:"function_ref"`
	Type        types.String `tfsdk:"type"`
	Schedule    types.String `tfsdk:"schedule"`
	Enabled     types.Bool   `tfsdk:"enabled"`
	TriggerURL  types.String `tfsdk:"trigger_url"`
}

func (r *TriggerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_trigger"
}

func replace() []planmodifier.String {
	return []planmodifier.String{stringplanmodifier.RequiresReplace()}
}

func (r *TriggerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An http trigger (the function's /fn/ URL; disabling every http trigger of a function stops it) or a cron trigger (runs the function in job mode on a 5-field schedule).",
		Attributes: map[string]schema.Attribute{
			"id":           schema.StringAttribute{Computed: true, PlanModifiers: keep()},
			"name":         schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"function_ref": schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"type": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Validators: []validator.String{stringvalidator.OneOf(string(apiv1.TriggerHTTP), string(apiv1.TriggerCron))}},
			"schedule": schema.StringAttribute{Optional: true, PlanModifiers: replace(),
				Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("type"))}, Description: "5-field cron expression (cron triggers only); the server checks it."},
			"enabled":     schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true), Description: "Changes in place."},
			"trigger_url": schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The function's /fn/ URL (http triggers)."},
		},
	}
}

func (r *TriggerResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	r.c = c
}

func (m *triggerModel) fill(t *apiv1.Trigger) {
	m.ID, m.Name, m.FunctionRef, m.Type = types.StringValue(t.Name), types.StringValue(t.Name), types.StringValue(t.FunctionRef), types.StringValue(string(t.Type))
	if t.Schedule != "" {
		m.Schedule = types.StringValue(t.Schedule)
	} else {
		m.Schedule = types.StringNull()
	}
	m.Enabled = types.BoolValue(t.IsEnabled())
	m.TriggerURL = types.StringValue(t.Status.URL)
}

func (r *TriggerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if apiv1.TriggerType(m.Type.ValueString()) == apiv1.TriggerCron && m.Schedule.ValueString() == "" {
		resp.Diagnostics.AddAttributeError(path.Root("schedule"), "Missing schedule", "a cron trigger needs a schedule, e.g. \"0 9 * * *\"")
		return
	}
	enabled := m.Enabled.ValueBool()
	t, err := r.c.CreateTrigger(ctx, apiv1.Trigger{Name: m.Name.ValueString(), FunctionRef: m.FunctionRef.ValueString(),
		Type: apiv1.TriggerType(m.Type.ValueString()), Schedule: m.Schedule.ValueString(), Enabled: &enabled})
	if err != nil {
		resp.Diagnostics.AddError("Creating the trigger failed", err.Error())
		return
	}
	m.fill(t)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *TriggerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.c.GetTrigger(ctx, m.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the trigger failed", err.Error())
		return
	}
	m.fill(t)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *TriggerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.c.SetTriggerEnabled(ctx, m.Name.ValueString(), m.Enabled.ValueBool())
	if err != nil {
		resp.Diagnostics.AddError("Updating the trigger failed", err.Error())
		return
	}
	m.fill(t)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *TriggerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if err := r.c.DeleteTrigger(ctx, m.Name.ValueString()); err != nil && !client.IsNotFound(err) {
		resp.Diagnostics.AddError("Deleting the trigger failed", err.Error())
	}
}

func (r *TriggerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
