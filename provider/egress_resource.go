package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                = (*EgressResource)(nil)
	_ resource.ResourceWithImportState = (*EgressResource)(nil)
)

// NewEgressResource is sless_namespace_egress.
func NewEgressResource() resource.Resource { return &EgressResource{} }

// EgressResource is the caller's namespace's egress rule: a narrowing of what the install permits.
type EgressResource struct{ c *client.Client }

type egressModel struct {
	ID           types.String `tfsdk:"id"`
	Mode         types.String `tfsdk:"mode"`
	Allow        types.Set    `tfsdk:"allow"`
	InstallMode  types.String `tfsdk:"install_mode"`
	InstallAllow types.Set    `tfsdk:"install_allow"`
	Note         types.String `tfsdk:"note"`
}

func (r *EgressResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_namespace_egress"
}

// allowValidator: CIDR:PORT, CIDR:* or a CIDR, written as the server stores it (host bits clear,
// "CIDR" for any port), so that a re-plan is empty.
var allowValidator = stringCheck{"CIDR:PORT or a CIDR (any port)", func(s string) error {
	a, err := apiv1.ParseEgressAllow(s)
	if err != nil {
		return err
	}
	if a.String() != s {
		return &apiv1.Error{Code: apiv1.CodeInvalidArgument, Message: "write " + s + " as " + a.String()}
	}
	return nil
}}

func (r *EgressResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "What the namespace's functions, jobs and cron runs may reach: a narrowing of what the install permits (never a widening, which the server refuses naming the entry). Destroying it gives the namespace all the install permits.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The namespace."},
			"mode": schema.StringAttribute{Required: true, Description: "internet (the outside: never the platform, the cluster, private, link-local or metadata ranges) or none (DNS and allow only).",
				Validators: []validator.String{stringvalidator.OneOf(string(apiv1.EgressInternet), string(apiv1.EgressNone))}},
			"allow": schema.SetAttribute{ElementType: types.StringType, Optional: true, Computed: true,
				Default:     setdefault.StaticValue(types.SetValueMust(types.StringType, nil)),
				Validators:  []validator.Set{setvalidator.SizeAtMost(apiv1.MaxEgressAllow), setvalidator.ValueStringsAre(allowValidator)},
				Description: "Destinations beyond the mode (CIDR:PORT, or a CIDR for any port), each within one the install permits the namespace."},
			"install_mode":  schema.StringAttribute{Computed: true, Description: "The install's default mode: the widest the namespace may choose."},
			"install_allow": schema.SetAttribute{ElementType: types.StringType, Computed: true, Description: "The destinations the install permits the namespace."},
			"note":          schema.StringAttribute{Computed: true, Description: "What the platform enforces instead of mode internet, where it cannot enforce it."},
		},
	}
}

func (r *EgressResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	r.c = c
}

func (m *egressModel) fill(ns string, eg *apiv1.Egress) {
	set := func(l []string) types.Set {
		vs := make([]attr.Value, 0, len(l))
		for _, s := range l {
			vs = append(vs, types.StringValue(s))
		}
		return types.SetValueMust(types.StringType, vs)
	}
	m.ID, m.Mode, m.Allow = types.StringValue(ns), types.StringValue(string(eg.Mode)), set(eg.Allow)
	m.InstallMode, m.InstallAllow, m.Note = types.StringValue(string(eg.Install.Mode)), set(eg.Install.Allow), types.StringValue(eg.Note)
}

func (r *EgressResource) set(ctx context.Context, m *egressModel) (*apiv1.Egress, error) {
	rule := apiv1.EgressRule{Mode: apiv1.EgressMode(m.Mode.ValueString()), Allow: []string{}}
	for _, v := range m.Allow.Elements() {
		if s, ok := v.(types.String); ok {
			rule.Allow = append(rule.Allow, s.ValueString())
		}
	}
	return r.c.SetEgress(ctx, rule)
}

func (r *EgressResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m egressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	eg, err := r.set(ctx, &m)
	if err != nil {
		resp.Diagnostics.AddError("Setting the namespace's egress rule failed", err.Error())
		return
	}
	m.fill(r.c.Namespace(), eg)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *EgressResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m egressModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	eg, err := r.c.GetEgress(ctx)
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the namespace's egress rule failed", err.Error())
		return
	}
	m.fill(r.c.Namespace(), eg)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *EgressResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m egressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	eg, err := r.set(ctx, &m)
	if err != nil {
		resp.Diagnostics.AddError("Setting the namespace's egress rule failed", err.Error())
		return
	}
	m.fill(r.c.Namespace(), eg)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// Delete gives the namespace back all the install permits it.
func (r *EgressResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	eg, err := r.c.GetEgress(ctx)
	if client.IsNotFound(err) {
		return
	}
	if err == nil {
		_, err = r.c.SetEgress(ctx, eg.Install)
	}
	if err != nil && !client.IsNotFound(err) {
		resp.Diagnostics.AddError("Resetting the namespace's egress rule failed", err.Error())
	}
}

// ImportState takes the namespace (any value: the caller's own is the only one it can read).
func (r *EgressResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
