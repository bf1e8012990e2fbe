package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// sless_namespace_egress on a real sless up whose install allows every namespace 10.0.5.0/24:5432:
// create narrowed, change in place, import, a widening refused at apply naming the entry, a
// non-canonical entry refused at plan, destroy giving back all the install permits.
func TestAccNamespaceEgress(t *testing.T) {
	acc(t) // the Terraform CLI and its environment
	u := testenv.StartSlessUp(t, t.TempDir(), "", "", "--egress-allow", "10.0.5.0/24:5432")
	config := func(mode string, allow string) string {
		return providerBlock(u) + fmt.Sprintf("resource \"sless_namespace_egress\" \"e\" {\n  mode  = %q\n  allow = [%s]\n}\n", mode, allow)
	}
	rule := func(mode apiv1.EgressMode, allow string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			eg, err := u.Client.GetEgress(context.Background())
			if err != nil {
				return err
			}
			if eg.Mode != mode || fmt.Sprint(eg.Allow) != allow {
				return fmt.Errorf("the server's rule: %s %v, want %s %s", eg.Mode, eg.Allow, mode, allow)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             rule(apiv1.EgressInternet, "[10.0.5.0/24:5432]"),
		Steps: []resource.TestStep{
			{
				Config: config("none", `"10.0.5.7/32:5432"`),
				Check: resource.ComposeAggregateTestCheckFunc(
					rule(apiv1.EgressNone, "[10.0.5.7/32:5432]"),
					resource.TestCheckResourceAttr("sless_namespace_egress.e", "id", u.Client.Namespace()),
					resource.TestCheckResourceAttr("sless_namespace_egress.e", "install_mode", "internet"),
					resource.TestCheckTypeSetElemAttr("sless_namespace_egress.e", "install_allow.*", "10.0.5.0/24:5432"),
				),
			},
			{
				Config: config("internet", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_namespace_egress.e", plancheck.ResourceActionUpdate),
				}},
				Check: rule(apiv1.EgressInternet, "[]"),
			},
			{ResourceName: "sless_namespace_egress.e", ImportState: true, ImportStateId: u.Client.Namespace(), ImportStateVerify: true},
			{Config: config("none", `"10.0.6.1/32:5432"`), ExpectError: regexp.MustCompile(`10\.0\.6\.1/32:5432`)},
			{Config: config("none", `"10.0.5.7/24:5432"`), ExpectError: regexp.MustCompile(`write 10\.0\.5\.7/24:5432 as 10\.0\.5\.0/24:5432`)},
			// The refusals changed nothing; the destroy after the last step plans from this config.
			{Config: config("internet", ""), Check: rule(apiv1.EgressInternet, "[]")},
		},
	})
}
