package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/sless-dev/sless/api/client"
)

// Address is the seed's provider source address, kept so existing configurations work.
const Address = "terra.k8c.ru/naeel/sless"

var _ provider.Provider = (*slessProvider)(nil)

// New returns the provider factory for providerserver.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &slessProvider{version: version} }
}

type slessProvider struct{ version string }

type providerModel struct {
	Endpoint      types.String `tfsdk:"endpoint"`
	Token         types.String `tfsdk:"token"`
	NubesEndpoint types.String `tfsdk:"nubes_endpoint"`
}

func (p *slessProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "sless"
	resp.Version = p.version
}

func (p *slessProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Deploys functions to sless: code is built into an image in seconds, served on /fn/{namespace}/{name}.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{Optional: true,
				Description: "Base URL of the sless API, e.g. http://127.0.0.1:8080. Environment: SLESS_ENDPOINT."},
			"token": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "JWT for the API; its subject decides the namespace. Environment: SLESS_API_TOKEN."},
			"nubes_endpoint": schema.StringAttribute{Optional: true,
				Description: "If set, the token is checked against this endpoint first (401/403 fails configuration). Environment: NUBES_ENDPOINT."},
		},
	}
}

func firstSet(v types.String, env string) string {
	if !v.IsNull() && !v.IsUnknown() && v.ValueString() != "" {
		return v.ValueString()
	}
	return os.Getenv(env)
}

func (p *slessProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	endpoint, token := firstSet(m.Endpoint, "SLESS_ENDPOINT"), firstSet(m.Token, "SLESS_API_TOKEN")
	nubes := firstSet(m.NubesEndpoint, "NUBES_ENDPOINT")
	if endpoint == "" || token == "" {
		resp.Diagnostics.AddError("sless provider is not configured",
			"Set endpoint and token in the provider block, or SLESS_ENDPOINT and SLESS_API_TOKEN in the environment.")
		return
	}
	if nubes != "" {
		if err := checkToken(ctx, nubes, token); err != nil {
			resp.Diagnostics.AddError("The token was refused by nubes_endpoint", err.Error())
			return
		}
	}
	c, err := client.New(endpoint, token, client.WithUserAgent("terraform-provider-sless/"+p.version))
	if err != nil {
		resp.Diagnostics.AddError("Invalid sless provider configuration", err.Error())
		return
	}
	if err := c.EnsureNamespace(ctx); err != nil {
		resp.Diagnostics.AddError("Cannot reach the sless API", fmt.Sprintf("ensuring namespace %s at %s: %v", c.Namespace(), endpoint, err))
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

// checkToken asks the cloud's API whether the token is valid (the seed's PingNubesAPI).
func checkToken(ctx context.Context, endpoint, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("GET %s answered %s: renew the token", endpoint, resp.Status)
	}
	return nil
}

func (p *slessProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewFunctionResource, NewTriggerResource, NewJobResource, NewSecretResource, NewEgressResource}
}

func (p *slessProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewFunctionDataSource}
}

// clientFrom takes the configured client from ProviderData.
func clientFrom(data any) (*client.Client, error) {
	if data == nil {
		return nil, nil // not configured yet (validation-only calls)
	}
	c, ok := data.(*client.Client)
	if !ok {
		return nil, fmt.Errorf("unexpected provider data %T", data)
	}
	return c, nil
}
