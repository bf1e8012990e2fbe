package provider

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/api/client"
)

var (
	_ resource.Resource                = (*FunctionResource)(nil)
	_ resource.ResourceWithImportState = (*FunctionResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*FunctionResource)(nil)
)

// NewFunctionResource is sless_function.
func NewFunctionResource() resource.Resource { return &FunctionResource{} }

// FunctionResource deploys one function: its spec, its code, and waits until it serves.
type FunctionResource struct{ c *client.Client }

type functionModel struct {
	ID              types.String `tfsdk:"id"`
	Name            types.String `tfsdk:"name"`
	Runtime         types.String `tfsdk:"runtime"`
	Entrypoint      types.String `tfsdk:"entrypoint"`
	SourceDir       types.String `tfsdk:"source_dir"`
	CodePath        types.String `tfsdk:"code_path"`
	CodeHash        types.String `tfsdk:"code_hash"`
	MemoryMB        types.Int64  `tfsdk:"memory_mb"`
	TimeoutSec      types.Int64  `tfsdk:"timeout_sec"`
	EnvVars         types.Map    `tfsdk:"env_vars"`
	SecretEnv       types.Map    `tfsdk:"secret_env"`
	SecretFiles     types.Map    `tfsdk:"secret_files"`
	MinReplicas     types.Int64  `tfsdk:"min_replicas"`
	MaxReplicas     types.Int64  `tfsdk:"max_replicas"`
	Concurrency     types.Int64  `tfsdk:"concurrency"`
	IdleTimeoutSec  types.Int64  `tfsdk:"idle_timeout_sec"`
	BuildTimeoutSec types.Int64  `tfsdk:"build_timeout_sec"`
	Image           types.String `tfsdk:"image"`
	Phase           types.String `tfsdk:"phase"`
	CodeSHA256      types.String `tfsdk:"code_sha256"`
	Namespace       types.String `tfsdk:"namespace"`
	URL             types.String `tfsdk:"url"`
	Replicas        types.Int64  `tfsdk:"replicas"`
	DesiredReplicas types.Int64  `tfsdk:"desired_replicas"`
	Async           types.Object `tfsdk:"async"`
}

// asyncModel is the async attribute of sless_function (and of its data source).
type asyncModel struct {
	Enabled    types.Bool  `tfsdk:"enabled"`
	MaxRetries types.Int64 `tfsdk:"max_retries"`
	MaxAgeSec  types.Int64 `tfsdk:"max_age_sec"`
	MaxQueued  types.Int64 `tfsdk:"max_queued"`
}

var asyncAttrTypes = map[string]attr.Type{
	"enabled": types.BoolType, "max_retries": types.Int64Type, "max_age_sec": types.Int64Type, "max_queued": types.Int64Type,
}

// asyncValue is the platform's async configuration as the attribute's value; null when it has none.
func asyncValue(a *apiv1.AsyncConfig) types.Object {
	if a == nil {
		return types.ObjectNull(asyncAttrTypes)
	}
	c := a.WithDefaults()
	return types.ObjectValueMust(asyncAttrTypes, map[string]attr.Value{
		"enabled": types.BoolValue(c.Enabled), "max_retries": types.Int64Value(int64(*c.MaxRetries)),
		"max_age_sec": types.Int64Value(int64(c.MaxAgeSec)), "max_queued": types.Int64Value(int64(c.MaxQueued)),
	})
}

func (r *FunctionResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func keep() []planmodifier.String {
	return []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
}

// defaultMaxReplicas plans the server's default max_replicas, the larger of
// apiv1.DefaultMaxReplicas and min_replicas, when the configuration leaves it out: the plan shows
// the value the server will report (no "known after apply" on every change, no inconsistent
// result when min_replicas moves), and removing max_replicas from the configuration returns it
// to the default, as a static default would.
type defaultMaxReplicas struct{}

func (defaultMaxReplicas) Description(context.Context) string {
	return fmt.Sprintf("when not configured, the larger of %d and min_replicas", apiv1.DefaultMaxReplicas)
}

func (d defaultMaxReplicas) MarkdownDescription(ctx context.Context) string {
	return d.Description(ctx)
}

func (defaultMaxReplicas) PlanModifyInt64(ctx context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.ConfigValue.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	var minReplicas types.Int64
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("min_replicas"), &minReplicas)...)
	if resp.Diagnostics.HasError() || minReplicas.IsNull() || minReplicas.IsUnknown() {
		return // unknown until min_replicas is known
	}
	resp.PlanValue = types.Int64Value(max(apiv1.DefaultMaxReplicas, minReplicas.ValueInt64()))
}

func (r *FunctionResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A function: its code (source_dir, or code_path with code_hash) is zipped, uploaded, built into an image in-process and served on /fn/{namespace}/{name}. Apply waits until the new code serves.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The function's name."},
			"name": schema.StringAttribute{Required: true, Validators: []validator.String{nameValidator},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()}, Description: "Name (a DNS-1123 label); changing it replaces the function."},
			"runtime": schema.StringAttribute{Required: true, Validators: []validator.String{runtimeValidator, runtimeLifecycleValidator},
				Description: strings.Join(apiv1.Runtimes(), " or ") + ". A deprecated runtime plans and applies with a warning naming its replacement; moving to another runtime is an in-place update (the code is rebuilt on it)."},
			"entrypoint": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(apiv1.DefaultEntrypoint),
				Validators: []validator.String{entrypointValidator}, Description: "module.function (python) or file.export (node)."},
			"source_dir": schema.StringAttribute{Optional: true, Description: "Directory of the code; zipped deterministically, so unchanged files plan no change.",
				Validators: []validator.String{stringvalidator.ExactlyOneOf(path.MatchRoot("source_dir"), path.MatchRoot("code_path"))}},
			"code_path": schema.StringAttribute{Optional: true, Description: "A zip of the code (instead of source_dir)."},
			"code_hash": schema.StringAttribute{Optional: true, Description: "With code_path: a hash of the code that changes when it does, e.g. filesha256(...)."},
			"memory_mb": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultMemoryMB),
				Validators: []validator.Int64{memoryValidator}, Description: fmt.Sprintf("Memory limit in MiB (%d–%d).", apiv1.MinMemoryMB, apiv1.MaxMemoryMB)},
			"timeout_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultTimeoutSec),
				Validators: []validator.Int64{timeoutValidator}, Description: fmt.Sprintf("Per-invocation timeout in seconds (%d–%d).", apiv1.MinTimeoutSec, apiv1.MaxTimeoutSec)},
			"min_replicas": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultMinReplicas),
				Validators:  []validator.Int64{minReplicasValidator},
				Description: fmt.Sprintf("Fewest instances kept running (0–%d); 0 lets the function scale to zero when idle. Changes in place.", apiv1.MaxReplicasLimit)},
			"max_replicas": schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: []planmodifier.Int64{defaultMaxReplicas{}},
				Validators:  []validator.Int64{maxReplicasValidator},
				Description: fmt.Sprintf("Most instances (1–%d, at least min_replicas); default the larger of %d and min_replicas. Changes in place.", apiv1.MaxReplicasLimit, apiv1.DefaultMaxReplicas)},
			"concurrency": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultConcurrency),
				Validators:  []validator.Int64{concurrencyValidator},
				Description: fmt.Sprintf("Most requests one instance is sent at once (%d–%d), a hard limit: the rest wait in the proxy's hold queue. Changes in place.", apiv1.MinConcurrency, apiv1.MaxConcurrency)},
			"idle_timeout_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultIdleTimeout),
				Validators:  []validator.Int64{idleTimeoutValidator},
				Description: fmt.Sprintf("An instance above min_replicas is stopped after this many seconds without a request (%d–%d). Changes in place.", apiv1.MinIdleTimeoutSec, apiv1.MaxIdleTimeoutSec)},
			// Sensitive: env_vars held secrets before secret_env existed, and may still.
			"env_vars": schema.MapAttribute{Optional: true, Sensitive: true, ElementType: types.StringType, Description: "Environment variables, set at run time (never baked into the image). Sensitive: plans show no values."},
			"secret_env": schema.MapAttribute{Optional: true, ElementType: types.StringType, Validators: []validator.Map{secretEnvValidator},
				Description: "Environment variables from the namespace's secrets: NAME = \"secret/key\". Changes in place (a restart, no rebuild); a new value of the secret restarts the function too."},
			"secret_files": schema.MapAttribute{Optional: true, ElementType: types.StringType, Validators: []validator.Map{secretFilesValidator},
				Description: "Secrets mounted as read-only files, one per key: \"" + apiv1.SecretFilesRoot + "<dir>\" = secret name. Changes in place."},
			"build_timeout_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(300), Description: "How long apply waits for the function to be Ready."},
			"image":             schema.StringAttribute{Computed: true, Description: "The function image, by digest."},
			"phase":             schema.StringAttribute{Computed: true, Description: "Pending, Building, Ready or Failed."},
			"code_sha256":       schema.StringAttribute{Computed: true, Description: "sha256 of the uploaded zip."},
			"namespace":         schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The namespace (from the token's subject)."},
			"url":               schema.StringAttribute{Computed: true, PlanModifiers: keep(), Description: "The function's /fn/ URL."},
			// No UseStateForUnknown: these move without Terraform (ModifyPlan plans them unknown on
			// every update).
			"replicas":         schema.Int64Attribute{Computed: true, Description: "Instances ready now."},
			"desired_replicas": schema.Int64Attribute{Computed: true, Description: "Instances the platform is scaling to."},
			"async": schema.SingleNestedAttribute{Optional: true,
				Description: "Asynchronous invocation: with enabled, /fn/ takes requests with X-Sless-Invocation-Type: Event (sless invoke --async), stores them and answers 202; the platform calls the function later, retrying and dead-lettering. Changes in place; removing the block turns it off.",
				Attributes: map[string]schema.Attribute{
					"enabled": schema.BoolAttribute{Required: true, Description: "Take asynchronous invocations."},
					"max_retries": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultAsyncMaxRetries),
						Validators:  []validator.Int64{int64validator.Between(0, apiv1.MaxAsyncMaxRetries)},
						Description: fmt.Sprintf("Retries of an event the function fails on (5xx, timeout, lost instance), a second apart and doubling, 0–%d. Default %d.", apiv1.MaxAsyncMaxRetries, apiv1.DefaultAsyncMaxRetries)},
					"max_age_sec": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultAsyncMaxAgeSec),
						Validators:  []validator.Int64{int64validator.Between(apiv1.MinAsyncMaxAgeSec, apiv1.DefaultAsyncMaxAgeSec)},
						Description: fmt.Sprintf("An event not delivered this many seconds after it was accepted (or redriven) is dead-lettered, %d–%d. Default %d.", apiv1.MinAsyncMaxAgeSec, apiv1.DefaultAsyncMaxAgeSec, apiv1.DefaultAsyncMaxAgeSec)},
					"max_queued": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(apiv1.DefaultAsyncMaxQueued),
						Validators:  []validator.Int64{int64validator.Between(1, apiv1.MaxAsyncMaxQueued)},
						Description: fmt.Sprintf("Events not yet done at most; beyond it /fn/ answers 429, 1–%d. Default %d.", apiv1.MaxAsyncMaxQueued, apiv1.DefaultAsyncMaxQueued)},
				},
			},
		},
	}
}

func (r *FunctionResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	c, err := clientFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider error", err.Error())
	}
	r.c = c
}

// code returns the archive to upload and its sha256.
func (m functionModel) code() ([]byte, string, error) {
	if !m.SourceDir.IsNull() {
		return zipDir(m.SourceDir.ValueString())
	}
	return fileSHA256(m.CodePath.ValueString())
}

// ModifyPlan plans code_sha256 from the files, so a code change is one in-place update and
// unchanged files plan nothing; the image is unknown only when something baked into it changes.
// replicas and desired_replicas change without Terraform (the platform scales the function), so
// any update plans them unknown: whatever the apply reads is consistent with the plan. With
// nothing to change they keep what the refresh read, and a plan shows no diff for them.
func (r *FunctionResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || plan.SourceDir.IsUnknown() || plan.CodePath.IsUnknown() {
		return
	}
	_, sum, err := plan.code()
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the function's code", err.Error())
		return
	}
	plan.CodeSHA256 = types.StringValue(sum)
	if !req.State.Raw.IsNull() {
		var state functionModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		same := state.CodeSHA256.ValueString() == sum && state.Runtime.Equal(plan.Runtime) && state.Entrypoint.Equal(plan.Entrypoint)
		if same && apiv1.Phase(state.Phase.ValueString()) == apiv1.PhaseReady {
			plan.Image, plan.Phase = state.Image, state.Phase
		} else {
			plan.Image, plan.Phase = types.StringUnknown(), types.StringUnknown()
		}
	}
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
	// The framework marks unset computed attributes unknown only when the configuration changes;
	// a code change (or a phase that is not Ready) is found here, so check again.
	if !resp.Diagnostics.HasError() && !req.State.Raw.IsNull() && !resp.Plan.Raw.Equal(req.State.Raw) {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("replicas"), types.Int64Unknown())...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("desired_replicas"), types.Int64Unknown())...)
	}
}

func (m functionModel) spec() (apiv1.Function, error) {
	f := apiv1.Function{Name: m.Name.ValueString(), Runtime: m.Runtime.ValueString(), Entrypoint: m.Entrypoint.ValueString(),
		MemoryMB: int(m.MemoryMB.ValueInt64()), TimeoutSec: int(m.TimeoutSec.ValueInt64()),
		// An unknown (or null) value is sent as 0: the server's default.
		MinReplicas: int(m.MinReplicas.ValueInt64()), MaxReplicas: int(m.MaxReplicas.ValueInt64()),
		Concurrency: int(m.Concurrency.ValueInt64()), IdleTimeoutSec: int(m.IdleTimeoutSec.ValueInt64())}
	var err error
	if f.EnvVars, err = stringMap("env_vars", m.EnvVars); err != nil {
		return f, err
	}
	if f.SecretEnv, err = stringMap("secret_env", m.SecretEnv); err != nil {
		return f, err
	}
	if f.SecretFiles, err = stringMap("secret_files", m.SecretFiles); err != nil {
		return f, err
	}
	f.Async, err = m.async()
	return f, err
}

// async is the async block to send; nil (off) when there is none. An unset value is sent as 0 or
// nil: the server's default.
func (m functionModel) async() (*apiv1.AsyncConfig, error) {
	if m.Async.IsNull() {
		return nil, nil
	}
	if m.Async.IsUnknown() {
		return nil, fmt.Errorf("async must be known at apply")
	}
	var b asyncModel
	if diags := m.Async.As(context.Background(), &b, basetypes.ObjectAsOptions{UnhandledUnknownAsEmpty: true}); diags.HasError() {
		return nil, fmt.Errorf("reading the async block: %v", diags)
	}
	if b.Enabled.IsUnknown() {
		return nil, fmt.Errorf("async.enabled must be known at apply")
	}
	a := &apiv1.AsyncConfig{Enabled: b.Enabled.ValueBool(), MaxAgeSec: int(b.MaxAgeSec.ValueInt64()), MaxQueued: int(b.MaxQueued.ValueInt64())}
	if !b.MaxRetries.IsNull() && !b.MaxRetries.IsUnknown() {
		n := int(b.MaxRetries.ValueInt64())
		a.MaxRetries = &n
	}
	return a, nil
}

// stringMap is a known map attribute's value; nil when null or unknown.
func stringMap(attr string, m types.Map) (map[string]string, error) {
	if m.IsNull() || m.IsUnknown() {
		return nil, nil
	}
	out := map[string]string{}
	for k, v := range m.Elements() {
		s, ok := v.(types.String)
		if !ok || s.IsUnknown() {
			return nil, fmt.Errorf("%s[%q] must be a known string", attr, k)
		}
		out[k] = s.ValueString()
	}
	return out, nil
}

// fillMap sets a map attribute from the platform's answer; an empty answer stays null unless the
// configuration has the attribute (an empty map there).
func fillMap(dst *types.Map, src map[string]string) {
	if len(src) == 0 && (dst.IsNull() || dst.IsUnknown()) {
		return
	}
	vals := map[string]types.String{}
	for k, v := range src {
		vals[k] = types.StringValue(v)
	}
	*dst, _ = types.MapValueFrom(context.Background(), types.StringType, vals)
}

// fill copies what the platform reports into the model.
func (m *functionModel) fill(f *apiv1.Function, ns string) {
	m.ID = types.StringValue(f.Name)
	m.Name = types.StringValue(f.Name)
	m.Runtime = types.StringValue(f.Runtime)
	m.Entrypoint = types.StringValue(f.Entrypoint)
	m.MemoryMB = types.Int64Value(int64(f.MemoryMB))
	m.TimeoutSec = types.Int64Value(int64(f.TimeoutSec))
	m.MinReplicas = types.Int64Value(int64(f.MinReplicas))
	m.MaxReplicas = types.Int64Value(int64(f.MaxReplicas))
	m.Concurrency = types.Int64Value(int64(f.Concurrency))
	m.IdleTimeoutSec = types.Int64Value(int64(f.IdleTimeoutSec))
	fillMap(&m.EnvVars, f.EnvVars)
	fillMap(&m.SecretEnv, f.SecretEnv)
	fillMap(&m.SecretFiles, f.SecretFiles)
	m.Image = types.StringValue(f.Status.Image)
	m.Phase = types.StringValue(string(f.Status.Phase))
	m.CodeSHA256 = types.StringValue(f.Status.CodeSHA256)
	m.Namespace = types.StringValue(ns)
	m.URL = types.StringValue(f.Status.URL)
	m.Replicas = types.Int64Value(int64(f.Status.Replicas))
	m.DesiredReplicas = types.Int64Value(int64(f.Status.DesiredReplicas))
	// A platform that stores a disabled async as none ("nil when off") means what a block with
	// enabled = false says: keep the block rather than plan it back for ever.
	if f.Async != nil || !asyncOff(m.Async) {
		m.Async = asyncValue(f.Async)
	}
	if m.BuildTimeoutSec.IsNull() || m.BuildTimeoutSec.IsUnknown() {
		m.BuildTimeoutSec = types.Int64Value(300)
	}
}

// asyncOff reports whether v is a known async block with enabled = false.
func asyncOff(v types.Object) bool {
	if v.IsNull() || v.IsUnknown() {
		return false
	}
	e, ok := v.Attributes()["enabled"].(types.Bool)
	return ok && !e.IsNull() && !e.IsUnknown() && !e.ValueBool()
}

// deploy uploads the code when it differs from what the platform has and waits for Ready,
// logging the function's new events (those after events' start) as the progress. A failure's
// error names the failed stage and carries the end of the build log (the instances' log when the
// function failed to start): the author sees why without another tool.
func (r *FunctionResource) deploy(ctx context.Context, m *functionModel, events *client.EventWatch, current string, mustWait bool) error {
	zip, sum, err := m.code()
	if err != nil {
		return err
	}
	if !m.CodeSHA256.IsUnknown() && m.CodeSHA256.ValueString() != "" && m.CodeSHA256.ValueString() != sum {
		return fmt.Errorf("the code changed between plan and apply (sha256 %s, planned %s); run apply again", sum, m.CodeSHA256.ValueString())
	}
	name := m.Name.ValueString()
	if sum != current {
		if _, err := r.c.Upload(ctx, name, bytes.NewReader(zip), int64(len(zip))); err != nil {
			return fmt.Errorf("uploading the code: %w", err)
		}
		mustWait = true
	}
	if !mustWait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(m.BuildTimeoutSec.ValueInt64())*time.Second)
	defer cancel()
	f, err := waitServing(wctx, r.c, events, name, sum)
	if f != nil {
		m.fill(f, r.c.Namespace())
	}
	if err != nil {
		return err
	}
	if f.Status.Phase == apiv1.PhaseFailed {
		return fmt.Errorf("the function %s", r.c.ExplainFailure(ctx, f))
	}
	return nil
}

// watchEvents starts watching the function's events; nil (progress not logged) when they cannot
// be read: the deploy does not depend on them.
func (r *FunctionResource) watchEvents(ctx context.Context, name string) *client.EventWatch {
	w, err := r.c.WatchEvents(ctx, name)
	if err != nil {
		tflog.Warn(ctx, "the function's events cannot be read; its progress is not logged", map[string]any{"function": name, "error": err.Error()})
	}
	return w
}

// waitServing polls until the function settles on code sha (client.Settled: Ready, or Failed) or
// ctx ends, logging each new event (unless events is nil).
func waitServing(ctx context.Context, c *client.Client, events *client.EventWatch, name, sha string) (*apiv1.Function, error) {
	for {
		f, err := c.GetFunction(ctx, name)
		if err != nil {
			return nil, err
		}
		if events != nil {
			evs, err := events.Next(ctx)
			if err != nil {
				events = nil // progress only: the status decides, and an API without events is not asked again
			}
			for _, e := range evs {
				tflog.Info(ctx, fmt.Sprintf("function %s: %s: %s", name, e.Reason, e.Message),
					map[string]any{"function": name, "stage": e.Reason, "message": e.Message, "event_type": e.Type})
			}
		}
		if client.Settled(f, sha) {
			return f, nil
		}
		select {
		case <-ctx.Done():
			return f, fmt.Errorf("function %s is still %s after build_timeout_sec (%s)", name, f.Status.Phase, f.Status.Message)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// platformWarnings returns ctx whose API calls add the warnings the platform answers with (a
// function on a deprecated runtime, or kept on a blocked one: the text names the replacement) to
// diags, as warnings of the runtime attribute.
func platformWarnings(ctx context.Context, diags *diag.Diagnostics) context.Context {
	return client.ContextWithWarningHandler(ctx, func(text string) {
		diags.AddAttributeWarning(path.Root("runtime"), "The platform warns", text)
	})
}

func (r *FunctionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, err := m.spec()
	if err != nil {
		resp.Diagnostics.AddError("Invalid function settings", err.Error())
		return
	}
	ctx = platformWarnings(ctx, &resp.Diagnostics)
	events := r.watchEvents(ctx, spec.Name)
	f, err := r.c.CreateFunction(ctx, spec)
	if client.IsAlreadyExists(err) {
		resp.Diagnostics.AddError("Function already exists",
			fmt.Sprintf("%q exists in namespace %s; import it with: terraform import <address> %s", spec.Name, r.c.Namespace(), spec.Name))
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Creating the function failed", err.Error())
		return
	}
	m.fill(f, r.c.Namespace())
	err = r.deploy(ctx, &m, events, "", true)
	// The function exists even if its build failed: keep it in state (Terraform taints it).
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	if err != nil {
		resp.Diagnostics.AddError("Deploying the function failed", err.Error())
	}
}

func (r *FunctionResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := r.c.GetFunction(ctx, m.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx) // deleted out of band: the next plan re-creates it
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading the function failed", err.Error())
		return
	}
	m.fill(f, r.c.Namespace())
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *FunctionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m, state functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, err := m.spec()
	if err != nil {
		resp.Diagnostics.AddError("Invalid function settings", err.Error())
		return
	}
	ctx = platformWarnings(ctx, &resp.Diagnostics)
	events := r.watchEvents(ctx, spec.Name)
	f, err := r.c.UpdateFunction(ctx, spec)
	if err != nil {
		resp.Diagnostics.AddError("Updating the function failed", err.Error())
		return
	}
	planned := m.CodeSHA256
	m.fill(f, r.c.Namespace())
	m.CodeSHA256 = planned
	// Any spec change is rolled out by the platform (a rebuild, a restart with new env vars or
	// limits, or for the scale just the controller catching up, Pending meanwhile): wait until the
	// function serves it, so phase is Ready as planned.
	changed := !state.Runtime.Equal(m.Runtime) || !state.Entrypoint.Equal(m.Entrypoint) || !state.MemoryMB.Equal(m.MemoryMB) ||
		!state.TimeoutSec.Equal(m.TimeoutSec) || !state.EnvVars.Equal(m.EnvVars) ||
		!state.SecretEnv.Equal(m.SecretEnv) || !state.SecretFiles.Equal(m.SecretFiles) || !state.MinReplicas.Equal(m.MinReplicas) ||
		!state.MaxReplicas.Equal(m.MaxReplicas) || !state.Concurrency.Equal(m.Concurrency) || !state.IdleTimeoutSec.Equal(m.IdleTimeoutSec) ||
		!state.Async.Equal(m.Async)
	err = r.deploy(ctx, &m, events, state.CodeSHA256.ValueString(), changed)
	if err == nil {
		if f, err = r.c.GetFunction(ctx, spec.Name); err == nil {
			m.fill(f, r.c.Namespace())
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	if err != nil {
		resp.Diagnostics.AddError("Deploying the function failed", err.Error())
	}
}

func (r *FunctionResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.c.DeleteFunction(ctx, m.Name.ValueString()); err != nil && !client.IsNotFound(err) {
		resp.Diagnostics.AddError("Deleting the function failed", err.Error())
	}
}

func (r *FunctionResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}
