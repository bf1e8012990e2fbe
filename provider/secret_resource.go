package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                = (*SecretResource)(nil)
	_ resource.ResourceWithImportState = (*SecretResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*SecretResource)(nil)
)

// NewSecretResource is sless_secret.
func NewSecretResource() resource.Resource { return &SecretResource{} }

// SecretResource is one of the namespace's secrets. The API never answers a value, so data lives
// only in the configuration and the state: a refresh reads the keys and the version, and when
// either shows that someone else wrote the secret, it forgets data so that the next plan writes
// the configured values again.
type SecretResource struct{ c *client.Client }

type secretModel struct {
	ID      types.String `tfsdk:"id"`
	Name    types.String `tfsdk:"name"`
	Data    types.Map    `tfsdk:"data"`
	Keys    types.List   `tfsdk:"keys"`
	Version types.Int64  `tfsdk:"version"`
}

func (r *SecretResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_secret"
}

func (r *SecretResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A secret of the namespace: named values a function takes as environment variables (secret_env) or files (secret_files). Write-only: the API answers its keys and version, never a value.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The secret's name."},
			"name": schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}, Description: "Name (a DNS-1123 label); changing it replaces the secret."},
			"data": schema.MapAttribute{Required: true, Sensitive: true, ElementType: types.StringType, Validators: []validator.Map{secretDataValidator},
				Description: fmt.Sprintf("The values by key (keys as environment variable names; a value at most %d bytes, %d in all). Written whole; changes in place and restarts the functions that use the secret.",
					apiv1.MaxSecretValueBytes, apiv1.MaxSecretBytes)},
			"keys":    schema.ListAttribute{Computed: true, ElementType: types.StringType, Description: "The secret's keys, sorted."},
			"version": schema.Int64Attribute{Computed: true, Description: "The secret's write counter (1 after the first write); it reveals nothing of the values."},
		},
	}
}

func (r *SecretResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	r.c = c
}

// data is the map to send; an unknown value at apply is a provider bug, not the user's.
func (m secretModel) data() (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m.Data.Elements() {
		s, ok := v.(types.String)
		if !ok || s.IsUnknown() || s.IsNull() {
			return nil, fmt.Errorf("data[%q] must be a known string", k)
		}
		out[k] = s.ValueString()
	}
	return out, nil
}

// dataKeys is data's keys, sorted as the API lists them.
func (m secretModel) dataKeys() []string {
	keys := make([]string, 0, len(m.Data.Elements()))
	for k := range m.Data.Elements() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (m *secretModel) fill(s *apiv1.Secret) {
	m.ID, m.Name = types.StringValue(s.Name), types.StringValue(s.Name)
	keys := slices.Sorted(slices.Values(s.Keys))
	m.Keys, _ = types.ListValueFrom(context.Background(), types.StringType, keys)
	m.Version = types.Int64Value(s.Version)
}

// ModifyPlan plans keys from data (the keys are not secret), and the version unknown when data
// changes (every write counts); unchanged data keeps both.
func (r *SecretResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan secretModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.Data.IsUnknown() {
		return
	}
	keysKnown := true
	for _, v := range plan.Data.Elements() {
		keysKnown = keysKnown && !v.IsUnknown()
	}
	if !keysKnown {
		return
	}
	var l types.List
	l, diags := types.ListValueFrom(ctx, types.StringType, plan.dataKeys())
	resp.Diagnostics.Append(diags...)
	plan.Keys = l
	if !req.State.Raw.IsNull() {
		var state secretModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if state.Data.Equal(plan.Data) {
			plan.Version = state.Version
		} else {
			plan.Version = types.Int64Unknown()
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// write puts data and records what the API answers.
func (r *SecretResource) write(ctx context.Context, m *secretModel) error {
	data, err := m.data()
	if err != nil {
		return err
	}
	s, err := r.c.PutSecret(ctx, m.Name.ValueString(), data)
	if err != nil {
		return err
	}
	m.fill(s)
	return nil
}

func (r *SecretResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m secretModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A PUT would silently take over a secret written by hand or by another configuration.
	if _, err := r.c.GetSecret(ctx, m.Name.ValueString()); err == nil {
		resp.Diagnostics.AddError("Secret already exists",
			fmt.Sprintf("%q exists in namespace %s; import it with: terraform import <address> %s (the next apply then writes data)", m.Name.ValueString(), r.c.Namespace(), m.Name.ValueString()))
		return
	} else if !client.IsNotFound(err) {
		resp.Diagnostics.AddError("Reading the secret failed", err.Error())
		return
	}
	if err := r.write(ctx, &m); err != nil {
		resp.Diagnostics.AddError("Writing the secret failed", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *SecretResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m secretModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	s, err := r.c.GetSecret(ctx, m.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx) // deleted out of band: the next plan re-creates it
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the secret failed", err.Error())
		return
	}
	// Another writer (another version, or other keys than state's data) means the values in state
	// are not the server's any more: forget them, and the configured data plans an update.
	if !m.Data.IsNull() && (m.Version.ValueInt64() != s.Version || !slices.Equal(m.dataKeys(), slices.Sorted(slices.Values(s.Keys)))) {
		m.Data = types.MapNull(types.StringType)
	}
	m.fill(s)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *SecretResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m secretModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.write(ctx, &m); err != nil {
		resp.Diagnostics.AddError("Writing the secret failed", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *SecretResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m secretModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := r.c.DeleteSecret(ctx, m.Name.ValueString())
	var ae *apiv1.Error
	switch {
	case err == nil || client.IsNotFound(err):
	case errors.As(err, &ae) && ae.Code == apiv1.CodeConflict:
		resp.Diagnostics.AddError("The secret is still in use", ae.Message)
	default:
		resp.Diagnostics.AddError("Deleting the secret failed", err.Error())
	}
}

// ImportState takes the name; the values cannot be read, so data stays null and the next apply
// writes the configured data (one update, version + 1).
func (r *SecretResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
