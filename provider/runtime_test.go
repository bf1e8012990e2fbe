package provider_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/provider"
)

// warnings records the warning diagnostics the provider gives Terraform, per kind of call: the
// real Terraform CLI prints them, and a test reads them here.
type warnings struct {
	mu                    sync.Mutex
	validate, plan, apply []string
}

func (w *warnings) add(to *[]string, diags []*tfprotov6.Diagnostic) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range diags {
		if d != nil && d.Severity == tfprotov6.DiagnosticSeverityWarning {
			*to = append(*to, d.Summary+": "+d.Detail)
		}
	}
}

// take returns what was recorded since the last take, and forgets it.
func (w *warnings) take() (validate, plan, apply []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	validate, plan, apply = w.validate, w.plan, w.apply
	w.validate, w.plan, w.apply = nil, nil, nil
	return
}

// recordingServer is the provider's server, its warnings recorded.
type recordingServer struct {
	tfprotov6.ProviderServer
	w *warnings
}

func (s recordingServer) ValidateResourceConfig(ctx context.Context, req *tfprotov6.ValidateResourceConfigRequest) (*tfprotov6.ValidateResourceConfigResponse, error) {
	resp, err := s.ProviderServer.ValidateResourceConfig(ctx, req)
	if resp != nil {
		s.w.add(&s.w.validate, resp.Diagnostics)
	}
	return resp, err
}

func (s recordingServer) PlanResourceChange(ctx context.Context, req *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	resp, err := s.ProviderServer.PlanResourceChange(ctx, req)
	if resp != nil {
		s.w.add(&s.w.plan, resp.Diagnostics)
	}
	return resp, err
}

func (s recordingServer) ApplyResourceChange(ctx context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	resp, err := s.ProviderServer.ApplyResourceChange(ctx, req)
	if resp != nil {
		s.w.add(&s.w.apply, resp.Diagnostics)
	}
	return resp, err
}

func mentions(texts []string, words ...string) bool {
	for _, t := range texts {
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(t, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// A function on a deprecated runtime: the configuration is validated with a warning naming the
// replacement (the catalog the provider knows), the apply carries the platform's warning (its
// `Warning` header) as a diagnostic; moving to the replacement is one attribute changed, an
// in-place update that rebuilds the code on the new runtime, and warns no more.
func TestAccFunctionRuntimeLifecycle(t *testing.T) {
	u := acc(t)
	w := &warnings{}
	recording := map[string]func() (tfprotov6.ProviderServer, error){
		"sless": func() (tfprotov6.ProviderServer, error) {
			s, err := providerserver.NewProtocol6WithError(provider.New("test")())()
			return recordingServer{s, w}, err
		},
	}
	src := filepath.Join(t.TempDir(), "code")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "handler.js"), []byte("exports.handle = async () => ({ node: process.versions.node });\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := func(rt string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_function" "f" {
  name       = "tf-node"
  runtime    = %q
  source_dir = %q
}
`, rt, src)
	}
	servesNode := func(major string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			code, body := u.Get("/fn/" + u.Client.Namespace() + "/tf-node")
			if code != 200 || !strings.Contains(body, `"node"`) || !strings.Contains(body, `"`+major+`.`) {
				return fmt.Errorf("/fn/ answered %d %q, want node %s", code, body, major)
			}
			return nil
		}
	}
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: recording,
		Steps: []resource.TestStep{
			{ // create on nodejs20: warned at validation and by the platform at apply
				PreConfig: func() { w.take() },
				Config:    config("nodejs20"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "runtime", "nodejs20"),
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					servesNode("20"),
					resource.TestCheckResourceAttrWith("sless_function.f", "image", func(v string) error { id = v; return nil }),
					func(*terraform.State) error {
						validate, _, apply := w.take()
						if !mentions(validate, "Deprecated runtime nodejs20", "deprecated since 2026-04-30", "nodejs22") {
							return fmt.Errorf("validation warnings %q: none names the deprecation and nodejs22", validate)
						}
						if !mentions(apply, "The platform warns", "runtime nodejs20 is deprecated", "move to nodejs22") {
							return fmt.Errorf("apply warnings %q: the platform's warning is not among them", apply)
						}
						return nil
					},
				),
			},
			{ // to nodejs22: one attribute, updated in place, no warning
				PreConfig: func() { w.take() },
				Config:    config("nodejs22"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.f", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("sless_function.f", tfjsonPath("image")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("sless_function.f", "runtime", "nodejs22"),
					resource.TestCheckResourceAttr("sless_function.f", "phase", "Ready"),
					servesNode("22"),
					resource.TestCheckResourceAttrWith("sless_function.f", "image", func(v string) error {
						if v == id {
							return fmt.Errorf("the image %s did not change with the runtime", v)
						}
						return nil
					}),
					func(*terraform.State) error {
						if validate, plan, apply := w.take(); len(validate)+len(plan)+len(apply) > 0 {
							return fmt.Errorf("warnings on nodejs22: validate %q, plan %q, apply %q", validate, plan, apply)
						}
						return nil
					},
				),
			},
		},
	})
}
