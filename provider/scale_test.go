package provider_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// waitFunction polls the API until ok holds for the function, or fails the test after a minute.
func waitFunction(t *testing.T, u *testenv.SlessUp, name string, ok func(*apiv1.Function) bool) *apiv1.Function {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		f, err := u.Client.GetFunction(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if ok(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("function %s: still %+v", name, f.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scaleIs checks the scale the API reports, so the state is not the only witness.
func scaleIs(u *testenv.SlessUp, name string, minR, maxR, conc, idle int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		f, err := u.Client.GetFunction(context.Background(), name)
		if err != nil {
			return err
		}
		if f.MinReplicas != minR || f.MaxReplicas != maxR || f.Concurrency != conc || f.IdleTimeoutSec != idle {
			return fmt.Errorf("the API has min %d max %d concurrency %d idle %d, want %d %d %d %d",
				f.MinReplicas, f.MaxReplicas, f.Concurrency, f.IdleTimeoutSec, minR, maxR, conc, idle)
		}
		return nil
	}
}

func checkScale(addr string, minR, maxR, conc, idle int) resource.TestCheckFunc {
	return resource.ComposeAggregateTestCheckFunc(
		resource.TestCheckResourceAttr(addr, "min_replicas", fmt.Sprint(minR)),
		resource.TestCheckResourceAttr(addr, "max_replicas", fmt.Sprint(maxR)),
		resource.TestCheckResourceAttr(addr, "concurrency", fmt.Sprint(conc)),
		resource.TestCheckResourceAttr(addr, "idle_timeout_sec", fmt.Sprint(idle)),
	)
}

var count = regexp.MustCompile(`^[0-9]+$`)

// TestAccFunctionScale: the scale attributes are set at create, change in place without a rebuild,
// read back the server's defaults (max_replicas follows min_replicas), import, and reach the data
// source; replicas changing without Terraform plans nothing and an update then applies cleanly.
func TestAccFunctionScale(t *testing.T) {
	u := acc(t)
	const name = "tf-scale"
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, "def handle(event):\n    return {'scale': 1}\n")
	config := func(scale, extra string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_function" "f" {
  name       = %q
  runtime    = "python3.11"
  source_dir = %q
%s}
%s`, name, src, scale, extra)
	}
	custom := "  min_replicas     = 1\n  max_replicas     = 5\n  concurrency      = 50\n  idle_timeout_sec = 60\n"
	updated := "  min_replicas     = 1\n  max_replicas     = 8\n  concurrency      = 100\n  idle_timeout_sec = 60\n"
	dataSource := `
data "sless_function" "f" {
  name       = sless_function.f.name
  depends_on = [sless_function.f]
}
`
	const addr = "sless_function.f"
	sameImage := statecheck.CompareValue(compare.ValuesSame())
	var image string
	var built time.Time
	remember := func(*terraform.State) error {
		f, err := u.Client.GetFunction(context.Background(), name)
		if err != nil {
			return err
		}
		if f.Status.LastBuiltAt == nil {
			return fmt.Errorf("no last_built_at: %+v", f.Status)
		}
		image, built = f.Status.Image, *f.Status.LastBuiltAt
		return nil
	}
	notRebuilt := func(*terraform.State) error {
		f, err := u.Client.GetFunction(context.Background(), name)
		if err != nil {
			return err
		}
		if f.Status.Image != image || f.Status.LastBuiltAt == nil || !f.Status.LastBuiltAt.Equal(built) {
			return fmt.Errorf("rebuilt: image %s built %v, before %s built %v", f.Status.Image, f.Status.LastBuiltAt, image, built)
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{ // create with custom values
				Config: config(custom, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkScale(addr, 1, 5, 50, 60),
					scaleIs(u, name, 1, 5, 50, 60),
					resource.TestCheckResourceAttr(addr, "phase", "Ready"),
					resource.TestMatchResourceAttr(addr, "replicas", count),
					resource.TestMatchResourceAttr(addr, "desired_replicas", count),
					servesBody(u, name, `"scale": 1`),
					remember,
				),
				ConfigStateChecks: []statecheck.StateCheck{sameImage.AddStateValue(addr, tfjsonPath("image"))},
			},
			{ // max_replicas and concurrency change in place: no rebuild, the image stays
				Config: config(updated, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonPath("max_replicas"), knownvalue.Int64Exact(8)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("concurrency"), knownvalue.Int64Exact(100)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("phase"), knownString("Ready")),
					plancheck.ExpectKnownValue(addr, tfjsonPath("image"), knownvalue.StringFunc(func(v string) error {
						if v != image {
							return fmt.Errorf("planned image %s, was %s", v, image)
						}
						return nil
					})),
					plancheck.ExpectUnknownValue(addr, tfjsonPath("replicas")),
					plancheck.ExpectUnknownValue(addr, tfjsonPath("desired_replicas")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkScale(addr, 1, 8, 100, 60),
					scaleIs(u, name, 1, 8, 100, 60),
					notRebuilt,
					servesBody(u, name, `"scale": 1`),
				),
				ConfigStateChecks: []statecheck.StateCheck{sameImage.AddStateValue(addr, tfjsonPath("image"))},
			},
			{ // replicas drop to 0 without Terraform (an http trigger switched off): nothing to plan
				PreConfig: func() {
					no := false
					if _, err := u.Client.CreateTrigger(context.Background(), apiv1.Trigger{Name: "tf-scale-off", Type: apiv1.TriggerHTTP,
						FunctionRef: name, Enabled: &no}); err != nil {
						t.Fatal(err)
					}
					waitFunction(t, u, name, func(f *apiv1.Function) bool { return f.Status.Replicas == 0 && f.Status.DesiredReplicas == 0 })
				},
				Config:   config(updated, ""),
				PlanOnly: true,
			},
			{ // and an update then plans them unknown; min_replicas 20 alone gives max_replicas 20
				Config: config("  min_replicas = 20\n", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonPath("max_replicas"), knownvalue.Int64Exact(20)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("concurrency"), knownvalue.Int64Exact(apiv1.DefaultConcurrency)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("idle_timeout_sec"), knownvalue.Int64Exact(apiv1.DefaultIdleTimeout)),
					plancheck.ExpectUnknownValue(addr, tfjsonPath("replicas")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkScale(addr, 20, 20, 10, 300),
					scaleIs(u, name, 20, 20, 10, 300),
					resource.TestCheckResourceAttr(addr, "replicas", "0"),
					resource.TestCheckResourceAttr(addr, "desired_replicas", "0"),
					notRebuilt,
				),
			},
			{ // nothing set: the defaults, max_replicas 10
				PreConfig: func() {
					if err := u.Client.DeleteTrigger(context.Background(), "tf-scale-off"); err != nil {
						t.Fatal(err)
					}
				},
				Config: config("", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonPath("min_replicas"), knownvalue.Int64Exact(0)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("max_replicas"), knownvalue.Int64Exact(apiv1.DefaultMaxReplicas)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkScale(addr, 0, 10, 10, 300),
					scaleIs(u, name, 0, 10, 10, 300),
					notRebuilt,
				),
			},
			{ // changed out of band: the plan puts the configuration back
				PreConfig: func() {
					f, err := u.Client.GetFunction(context.Background(), name)
					if err != nil {
						t.Fatal(err)
					}
					f.MaxReplicas, f.Concurrency = 30, 7
					if _, err := u.Client.UpdateFunction(context.Background(), *f); err != nil {
						t.Fatal(err)
					}
				},
				Config: config("", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonPath("max_replicas"), knownvalue.Int64Exact(10)),
					plancheck.ExpectKnownValue(addr, tfjsonPath("concurrency"), knownvalue.Int64Exact(10)),
				}},
				Check: scaleIs(u, name, 0, 10, 10, 300),
			},
			{ // import reads the scale back (replicas move on their own: not compared)
				Config: config(custom, ""),
			},
			{
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           name,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source_dir", "build_timeout_sec", "replicas", "desired_replicas"},
			},
			{ // the data source
				Config: config(custom, dataSource),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkScale("data.sless_function.f", 1, 5, 50, 60),
					resource.TestMatchResourceAttr("data.sless_function.f", "replicas", count),
					resource.TestMatchResourceAttr("data.sless_function.f", "desired_replicas", count),
					resource.TestCheckResourceAttrPair("data.sless_function.f", "image", addr, "image"),
				),
			},
		},
	})
}
