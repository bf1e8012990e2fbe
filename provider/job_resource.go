package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                = (*JobResource)(nil)
	_ resource.ResourceWithImportState = (*JobResource)(nil)
)

// NewJobResource is sless_job.
func NewJobResource() resource.Resource { return &JobResource{} }

// JobResource runs a function once with an event; raising run_id runs it again (in place).
type JobResource struct{ c *client.Client }

type jobModel struct {
	ID             types.String `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	FunctionRef    types.String `tfsdk:"function_ref"`
	RunID          types.Int64  `tfsdk:"run_id"`
	EventJSON      types.String `tfsdk:"event_json"`
	WaitTimeoutSec types.Int64  `tfsdk:"wait_timeout_sec"`
	Phase          types.String `tfsdk:"phase"`
	JobMessage     types.String `tfsdk:"job_message"`
}

func (r *JobResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

func (r *JobResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Runs a function once in job mode with event_json as the event. run_id 0 does not run; raising run_id runs again. Apply waits for the result (job_message).",
		Attributes: map[string]schema.Attribute{
			"id":               schema.StringAttribute{Computed: true, PlanModifiers: keep()},
			"name":             schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"function_ref":     schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"run_id":           schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(0), Description: "Raise to run again."},
			"event_json":       schema.StringAttribute{Optional: true, Validators: []validator.String{jsonValidator}, Description: "The event, as JSON text (jsonencode(...)); it takes effect at the next run."},
			"wait_timeout_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(300), Description: "How long apply waits for a run to finish."},
			"phase":            schema.StringAttribute{Computed: true, Description: "Pending, Skipped, Running, Succeeded or Failed."},
			"job_message":      schema.StringAttribute{Computed: true, Description: "The run's result (the handler's JSON) or its error."},
		},
	}
}

func (r *JobResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	r.c = c
}

// fill copies the platform's view; event_json stays as configured (it applies at the next run).
func (m *jobModel) fill(j *apiv1.Job) {
	m.ID, m.Name, m.FunctionRef = types.StringValue(j.Name), types.StringValue(j.Name), types.StringValue(j.FunctionRef)
	m.RunID = types.Int64Value(j.RunID)
	m.Phase = types.StringValue(string(j.Status.Phase))
	m.JobMessage = types.StringValue(j.Status.Message)
	if m.WaitTimeoutSec.IsNull() || m.WaitTimeoutSec.IsUnknown() {
		m.WaitTimeoutSec = types.Int64Value(300)
	}
}

// wait polls until run runID finished (or the job will not run).
func (r *JobResource) wait(ctx context.Context, m *jobModel) error {
	if m.RunID.ValueInt64() == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.WaitTimeoutSec.ValueInt64())*time.Second)
	defer cancel()
	for {
		j, err := r.c.GetJob(ctx, m.Name.ValueString())
		if err != nil {
			return err
		}
		m.fill(j)
		if j.Status.LastRunID == j.RunID && (j.Status.Phase == apiv1.JobSucceeded || j.Status.Phase == apiv1.JobFailed) {
			if j.Status.Phase == apiv1.JobFailed {
				return fmt.Errorf("run %d failed: %s", j.RunID, j.Status.Message)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %d is still %s after wait_timeout_sec", j.RunID, j.Status.Phase)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *JobResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.c.CreateJob(ctx, apiv1.Job{Name: m.Name.ValueString(), FunctionRef: m.FunctionRef.ValueString(),
		EventJSON: m.EventJSON.ValueString(), RunID: m.RunID.ValueInt64()})
	if err != nil {
		resp.Diagnostics.AddError("Creating the job failed", err.Error())
		return
	}
	resp.Diagnostics.Append(r.settle(ctx, j, &m, &resp.State)...)
}

// settle waits for the run the platform just accepted and stores the outcome; a failed run is
// stored too (Terraform taints the resource) and reported.
func (r *JobResource) settle(ctx context.Context, j *apiv1.Job, m *jobModel, state *tfsdk.State) diag.Diagnostics {
	m.fill(j)
	err := r.wait(ctx, m)
	diags := state.Set(ctx, m)
	if err != nil {
		diags.AddError("The job failed", err.Error())
	}
	return diags
}

func (r *JobResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.c.GetJob(ctx, m.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the job failed", err.Error())
		return
	}
	m.fill(j)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *JobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.c.PutJob(ctx, apiv1.Job{Name: m.Name.ValueString(), FunctionRef: m.FunctionRef.ValueString(),
		EventJSON: m.EventJSON.ValueString(), RunID: m.RunID.ValueInt64()})
	if err != nil {
		resp.Diagnostics.AddError("Updating the job failed", err.Error())
		return
	}
	resp.Diagnostics.Append(r.settle(ctx, j, &m, &resp.State)...)
}

func (r *JobResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if err := r.c.DeleteJob(ctx, m.Name.ValueString()); err != nil && !client.IsNotFound(err) {
		resp.Diagnostics.AddError("Deleting the job failed", err.Error())
	}
}

func (r *JobResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
