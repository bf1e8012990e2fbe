package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                   = (*TriggerResource)(nil)
	_ resource.ResourceWithImportState    = (*TriggerResource)(nil)
	_ resource.ResourceWithValidateConfig = (*TriggerResource)(nil)
)

// NewTriggerResource is sless_trigger.
func NewTriggerResource() resource.Resource { return &TriggerResource{} }

// TriggerResource is an http, cron or rabbitmq trigger. Only enabled changes in place.
type TriggerResource struct{ c *client.Client }

type triggerModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	FunctionRef types.String `tfsdk:"function_ref"`
	Type        types.String `tfsdk:"type"`
	Schedule    types.String `tfsdk:"schedule"`
	Enabled     types.Bool   `tfsdk:"enabled"`
	TriggerURL  types.String `tfsdk:"trigger_url"`
	RabbitMQ    types.Object `tfsdk:"rabbitmq"`
	// A rabbitmq trigger's consumer, as the platform reports it; null for other types.
	Connected         types.Bool   `tfsdk:"connected"`
	LastError         types.String `tfsdk:"last_error"`
	InFlight          types.Int64  `tfsdk:"in_flight"`
	DeliveredTotal    types.Int64  `tfsdk:"delivered_total"`
	DeadLetteredTotal types.Int64  `tfsdk:"dead_lettered_total"`
}

// rabbitMQModel is the rabbitmq attribute of sless_trigger.
type rabbitMQModel struct {
	URLSecret      types.String `tfsdk:"url_secret"`
	Queue          types.String `tfsdk:"queue"`
	Passive        types.Bool   `tfsdk:"passive"`
	Prefetch       types.Int64  `tfsdk:"prefetch"`
	MaxRetries     types.Int64  `tfsdk:"max_retries"`
	RetryBackoffMS types.Int64  `tfsdk:"retry_backoff_ms"`
	DeadLetter     types.String `tfsdk:"dead_letter"`
}

var rabbitMQAttrTypes = map[string]attr.Type{
	"url_secret": types.StringType, "queue": types.StringType, "passive": types.BoolType, "prefetch": types.Int64Type,
	"max_retries": types.Int64Type, "retry_backoff_ms": types.Int64Type, "dead_letter": types.StringType,
}

func (r *TriggerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_trigger"
}

func replace() []planmodifier.String {
	return []planmodifier.String{stringplanmodifier.RequiresReplace()}
}

// Every setting of a rabbitmq block but enabled replaces the trigger, as the trigger's other
// fixed fields do. RequiresReplace sits on each nested attribute, not on the object: on an update
// of enabled the framework plans an unset dead_letter unknown before the object's modifiers run,
// and an object-level RequiresReplace would then replace the trigger for nothing.
func replaceInt64() []planmodifier.Int64 {
	return []planmodifier.Int64{int64planmodifier.RequiresReplace()}
}

// defaultDeadLetter plans the server's default dead_letter, the queue's name + ".dlq", when the
// configuration leaves it out: the plan shows what the server will report.
type defaultDeadLetter struct{}

func (defaultDeadLetter) Description(context.Context) string {
	return "when not configured, the queue's name + \"" + apiv1.DeadLetterSuffix + "\""
}

func (d defaultDeadLetter) MarkdownDescription(ctx context.Context) string { return d.Description(ctx) }

func (defaultDeadLetter) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if !req.ConfigValue.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	var queue types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, req.Path.ParentPath().AtName("queue"), &queue)...)
	if resp.Diagnostics.HasError() || queue.IsNull() || queue.IsUnknown() {
		return // unknown until the queue is known
	}
	resp.PlanValue = types.StringValue(queue.ValueString() + apiv1.DeadLetterSuffix)
}

func (r *TriggerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	status := func(desc string) string {
		return desc + " Rabbitmq triggers only (null for the others); read-only, never a diff."
	}
	resp.Schema = schema.Schema{
		Description: "An http trigger (the function's /fn/ URL; disabling every http trigger of a function stops it), a cron trigger (runs the function in job mode on a 5-field schedule) or a rabbitmq trigger (calls the function with every message of a queue; ack after a 2xx, retries, a dead-letter queue).",
		Attributes: map[string]schema.Attribute{
			"id":           schema.StringAttribute{Computed: true, PlanModifiers: keep()},
			"name":         schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"function_ref": schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator}, PlanModifiers: replace()},
			"type": schema.StringAttribute{Required: true, PlanModifiers: replace(),
				Validators: []validator.String{stringvalidator.OneOf(string(apiv1.TriggerHTTP), string(apiv1.TriggerCron), string(apiv1.TriggerRabbitMQ))}},
			"schedule": schema.StringAttribute{Optional: true, PlanModifiers: replace(),
				Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("type"))}, Description: "5-field cron expression (cron triggers only); the server checks it."},
			"enabled":     schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(true), Description: "Changes in place."},
			"trigger_url": schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The function's /fn/ URL (http triggers)."},
			"rabbitmq": schema.SingleNestedAttribute{Optional: true,
				Description: "The queue and delivery rule of a rabbitmq trigger (required for type rabbitmq, refused for the others). Every setting replaces the trigger.",
				Attributes: map[string]schema.Attribute{
					"url_secret": schema.StringAttribute{Required: true, Validators: []validator.String{urlSecretValidator}, PlanModifiers: replace(),
						Description: "\"secret/key\": the namespace secret's key holding the broker's amqp:// or amqps:// URL with its credentials (a sless_secret), never the URL itself."},
					"queue": schema.StringAttribute{Required: true, Validators: []validator.String{stringvalidator.LengthBetween(1, 255)}, PlanModifiers: replace(),
						Description: "The queue consumed; declared durable unless passive."},
					"passive": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
						PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplace()}, Description: "The queue must exist already (not declared). Default false."},
					"prefetch": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultPrefetch),
						Validators: []validator.Int64{int64validator.Between(1, apiv1.MaxPrefetch)}, PlanModifiers: replaceInt64(),
						Description: fmt.Sprintf("Messages in flight at most (1 keeps them in order), 1–%d. Default %d.", apiv1.MaxPrefetch, apiv1.DefaultPrefetch)},
					"max_retries": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultMaxRetries),
						Validators: []validator.Int64{int64validator.Between(0, apiv1.MaxMaxRetries)}, PlanModifiers: replaceInt64(),
						Description: fmt.Sprintf("Retries of a message the function fails on (5xx, timeout, lost instance) before it is dead-lettered, 0–%d. Default %d.", apiv1.MaxMaxRetries, apiv1.DefaultMaxRetries)},
					"retry_backoff_ms": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultRetryBackoffMS),
						Validators: []validator.Int64{int64validator.Between(1, apiv1.MaxRetryBackoffMS)}, PlanModifiers: replaceInt64(),
						Description: fmt.Sprintf("The first retry's delay in ms, doubling, 1–%d. Default %d.", apiv1.MaxRetryBackoffMS, apiv1.DefaultRetryBackoffMS)},
					"dead_letter": schema.StringAttribute{Optional: true, Computed: true, Validators: []validator.String{stringvalidator.LengthBetween(1, 255)},
						PlanModifiers: []planmodifier.String{defaultDeadLetter{}, stringplanmodifier.RequiresReplace()},
						Description:   "The queue failed messages are published to (always declared). Default the queue's name + \"" + apiv1.DeadLetterSuffix + "\"."},
				},
			},
			// No plan modifiers: the consumer moves these without Terraform. A plan with nothing to
			// change keeps what the refresh read; an update plans them unknown.
			"connected":           schema.BoolAttribute{Computed: true, Description: status("The consumer is connected to its broker and consuming.")},
			"last_error":          schema.StringAttribute{Computed: true, Description: status("Why the consumer is not connected (a missing secret, a refused address, a lost connection) or the last failed delivery; empty when none.")},
			"in_flight":           schema.Int64Attribute{Computed: true, Description: status("Messages being delivered now.")},
			"delivered_total":     schema.Int64Attribute{Computed: true, Description: status("Messages acknowledged after a 2xx since the consumer started.")},
			"dead_lettered_total": schema.Int64Attribute{Computed: true, Description: status("Messages published to the dead-letter queue since the consumer started.")},
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

// ValidateConfig checks at plan time what depends on type: a rabbitmq trigger has a rabbitmq
// block and no schedule, a cron trigger a schedule, the others neither.
func (r *TriggerResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var typ, schedule types.String
	var mq types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("type"), &typ)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("schedule"), &schedule)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("rabbitmq"), &mq)...)
	if resp.Diagnostics.HasError() || typ.IsNull() || typ.IsUnknown() {
		return
	}
	t := apiv1.TriggerType(typ.ValueString())
	switch {
	case t == apiv1.TriggerRabbitMQ && mq.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("rabbitmq"), "Missing rabbitmq block",
			"a rabbitmq trigger needs rabbitmq = { url_secret = \"secret/key\", queue = \"...\" }")
	case t != apiv1.TriggerRabbitMQ && !mq.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("rabbitmq"), "Unexpected rabbitmq block",
			fmt.Sprintf("only a rabbitmq trigger has a rabbitmq block (type is %q)", t))
	}
	switch {
	case t == apiv1.TriggerCron && schedule.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("schedule"), "Missing schedule", "a cron trigger needs a schedule, e.g. \"0 9 * * *\"")
	case t != apiv1.TriggerCron && !schedule.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("schedule"), "Unexpected schedule", fmt.Sprintf("only a cron trigger has a schedule (type is %q)", t))
	}
}

// rabbitMQ is the rabbitmq block to send; nil when there is none. An unknown value (dead_letter
// planned from an unknown queue) is sent as the server's default.
func (m triggerModel) rabbitMQ(ctx context.Context) (*apiv1.RabbitMQTrigger, error) {
	if m.RabbitMQ.IsNull() || m.RabbitMQ.IsUnknown() {
		return nil, nil
	}
	var b rabbitMQModel
	if diags := m.RabbitMQ.As(ctx, &b, basetypes.ObjectAsOptions{UnhandledUnknownAsEmpty: true}); diags.HasError() {
		return nil, fmt.Errorf("reading the rabbitmq block: %v", diags)
	}
	if b.URLSecret.IsUnknown() || b.Queue.IsUnknown() {
		return nil, fmt.Errorf("rabbitmq.url_secret and rabbitmq.queue must be known at apply")
	}
	mq := &apiv1.RabbitMQTrigger{URLSecret: b.URLSecret.ValueString(), Queue: b.Queue.ValueString(), Passive: b.Passive.ValueBool(),
		Prefetch: int(b.Prefetch.ValueInt64()), RetryBackoffMS: int(b.RetryBackoffMS.ValueInt64()), DeadLetter: b.DeadLetter.ValueString()}
	if !b.MaxRetries.IsNull() && !b.MaxRetries.IsUnknown() {
		n := int(b.MaxRetries.ValueInt64())
		mq.MaxRetries = &n
	}
	return mq, nil
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
	m.RabbitMQ = types.ObjectNull(rabbitMQAttrTypes)
	m.Connected, m.LastError = types.BoolNull(), types.StringNull()
	m.InFlight, m.DeliveredTotal, m.DeadLetteredTotal = types.Int64Null(), types.Int64Null(), types.Int64Null()
	if mq := t.RabbitMQ; mq != nil {
		maxRetries := int64(apiv1.DefaultMaxRetries)
		if mq.MaxRetries != nil {
			maxRetries = int64(*mq.MaxRetries)
		}
		m.RabbitMQ = types.ObjectValueMust(rabbitMQAttrTypes, map[string]attr.Value{
			"url_secret": types.StringValue(mq.URLSecret), "queue": types.StringValue(mq.Queue), "passive": types.BoolValue(mq.Passive),
			"prefetch": types.Int64Value(int64(mq.Prefetch)), "max_retries": types.Int64Value(maxRetries),
			"retry_backoff_ms": types.Int64Value(int64(mq.RetryBackoffMS)), "dead_letter": types.StringValue(mq.DeadLetter),
		})
		s := t.Status
		m.Connected, m.LastError = types.BoolValue(s.Connected), types.StringValue(s.LastError)
		m.InFlight, m.DeliveredTotal, m.DeadLetteredTotal = types.Int64Value(int64(s.InFlight)), types.Int64Value(s.DeliveredTotal), types.Int64Value(s.DeadLetteredTotal)
	}
}

func (r *TriggerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	mq, err := m.rabbitMQ(ctx)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("rabbitmq"), "Invalid rabbitmq block", err.Error())
		return
	}
	enabled := m.Enabled.ValueBool()
	t, err := r.c.CreateTrigger(ctx, apiv1.Trigger{Name: m.Name.ValueString(), FunctionRef: m.FunctionRef.ValueString(),
		Type: apiv1.TriggerType(m.Type.ValueString()), Schedule: m.Schedule.ValueString(), RabbitMQ: mq, Enabled: &enabled})
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
