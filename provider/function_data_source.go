package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var _ datasource.DataSource = (*FunctionDataSource)(nil)

// NewFunctionDataSource is the sless_function data source.
func NewFunctionDataSource() datasource.DataSource { return &FunctionDataSource{} }

// FunctionDataSource reads an existing function.
type FunctionDataSource struct{ c *client.Client }

type functionDataModel struct {
	Name       types.String `tfsdk:"name"`
	Runtime    types.String `tfsdk:"runtime"`
	Entrypoint types.String `tfsdk:"entrypoint"`
	MemoryMB   types.Int64  `tfsdk:"memory_mb"`
	TimeoutSec types.Int64  `tfsdk:"timeout_sec"`
	Image      types.String `tfsdk:"image"`
	Phase      types.String `tfsdk:"phase"`
	CodeSHA256 types.String `tfsdk:"code_sha256"`
	Namespace  types.String `tfsdk:"namespace"`
	URL        types.String `tfsdk:"url"`
	// Scale, and what the platform runs now.
	MinReplicas     types.Int64 `tfsdk:"min_replicas"`
	MaxReplicas     types.Int64 `tfsdk:"max_replicas"`
	Concurrency     types.Int64 `tfsdk:"concurrency"`
	IdleTimeoutSec  types.Int64 `tfsdk:"idle_timeout_sec"`
	Replicas        types.Int64 `tfsdk:"replicas"`
	DesiredReplicas types.Int64 `tfsdk:"desired_replicas"`
	// Async is the function's asynchronous invocation; null when it has none.
	Async types.Object `tfsdk:"async"`
}

func (d *FunctionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (d *FunctionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: desc}
	}
	number := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "Reads a function of the caller's namespace.",
		Attributes: map[string]schema.Attribute{
			"name":             schema.StringAttribute{Required: true},
			"runtime":          computed("The runtime: " + strings.Join(apiv1.Runtimes(), ", ") + "."),
			"entrypoint":       computed("module.function or file.export."),
			"memory_mb":        schema.Int64Attribute{Computed: true},
			"timeout_sec":      schema.Int64Attribute{Computed: true},
			"image":            computed("The function image, by digest."),
			"phase":            computed("Pending, Building, Ready or Failed."),
			"code_sha256":      computed("sha256 of the uploaded zip."),
			"namespace":        computed("The namespace."),
			"url":              computed("The function's /fn/ URL."),
			"min_replicas":     number("Fewest instances kept running (0 scales to zero when idle)."),
			"max_replicas":     number("Most instances."),
			"concurrency":      number("Most requests one instance is sent at once; the rest wait in the proxy's hold queue."),
			"idle_timeout_sec": number("Seconds without a request after which an instance above min_replicas is stopped."),
			"replicas":         number("Instances ready now."),
			"desired_replicas": number("Instances the platform is scaling to."),
			"async": schema.SingleNestedAttribute{Computed: true,
				Description: "Asynchronous invocation (X-Sless-Invocation-Type: Event), defaults filled in; null when the function has none.",
				Attributes: map[string]schema.Attribute{
					"enabled":     schema.BoolAttribute{Computed: true, Description: "Asynchronous invocations are taken."},
					"max_retries": number("Retries of an event the function fails on."),
					"max_age_sec": number("Seconds after which an undelivered event is dead-lettered."),
					"max_queued":  number("Events not yet done at most; beyond it /fn/ answers 429."),
				},
			},
		},
	}
}

func (d *FunctionDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	d.c = c
}

func (d *FunctionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m functionDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := d.c.GetFunction(ctx, m.Name.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Reading the function failed", err.Error())
		return
	}
	m.Runtime, m.Entrypoint = types.StringValue(f.Runtime), types.StringValue(f.Entrypoint)
	m.MemoryMB, m.TimeoutSec = types.Int64Value(int64(f.MemoryMB)), types.Int64Value(int64(f.TimeoutSec))
	m.Image, m.Phase, m.CodeSHA256 = types.StringValue(f.Status.Image), types.StringValue(string(f.Status.Phase)), types.StringValue(f.Status.CodeSHA256)
	m.Namespace, m.URL = types.StringValue(d.c.Namespace()), types.StringValue(f.Status.URL)
	m.MinReplicas, m.MaxReplicas = types.Int64Value(int64(f.MinReplicas)), types.Int64Value(int64(f.MaxReplicas))
	m.Concurrency, m.IdleTimeoutSec = types.Int64Value(int64(f.Concurrency)), types.Int64Value(int64(f.IdleTimeoutSec))
	m.Replicas, m.DesiredReplicas = types.Int64Value(int64(f.Status.Replicas)), types.Int64Value(int64(f.Status.DesiredReplicas))
	m.Async = asyncValue(f.Async)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
