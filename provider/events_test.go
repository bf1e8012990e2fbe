package provider_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

// A rabbitmq trigger through Terraform on a real sless up, without a broker (its consumer reports
// it is not connected, which is all the provider reads): created with the defaults the API fills
// in planned and read back, enabled changed in place, any other setting replacing it, imported,
// and its status attributes read-only without a diff (resource.Test plans again after each step).
func TestAccRabbitMQTrigger(t *testing.T) {
	u := acc(t)
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, "def handle(event):\n    return {'ok': True}\n")
	config := func(enabled bool, mq string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_secret" "mq" {
  name = "mq"
  data = { url = "amqp://orders:not-a-secret@broker.invalid:5672/" }
}
resource "sless_function" "f" {
  name       = "tf-orders"
  runtime    = "python3.11"
  source_dir = %q
}
resource "sless_trigger" "web" {
  name         = "tf-orders-web"
  function_ref = sless_function.f.name
  type         = "http"
}
resource "sless_trigger" "orders" {
  name         = "tf-orders-mq"
  function_ref = sless_function.f.name
  type         = "rabbitmq"
  enabled      = %v
  rabbitmq = {
    url_secret = "${sless_secret.mq.name}/url"
    queue      = "orders"
%s
  }
}
`, src, enabled, mq)
	}
	const addr = "sless_trigger.orders"
	rabbitmq := func(want apiv1.RabbitMQTrigger) resource.TestCheckFunc {
		return func(*terraform.State) error {
			tr, err := u.Client.GetTrigger(context.Background(), "tf-orders-mq")
			if err != nil {
				return err
			}
			got := tr.RabbitMQ
			if got == nil || got.URLSecret != want.URLSecret || got.Queue != want.Queue || got.Passive != want.Passive || got.Prefetch != want.Prefetch ||
				got.MaxRetries == nil || *got.MaxRetries != *want.MaxRetries || got.RetryBackoffMS != want.RetryBackoffMS || got.DeadLetter != want.DeadLetter {
				return fmt.Errorf("the platform has rabbitmq %+v, want %+v", got, want)
			}
			return nil
		}
	}
	two, five := 2, 5
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if ts, _ := u.Client.ListTriggers(context.Background()); len(ts) != 0 {
				return fmt.Errorf("triggers left after destroy: %v", ts)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{ // create: the defaults are planned, so the plan after apply is empty
				Config: config(true, "    prefetch    = 5\n    max_retries = 2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue(addr, tfjsonPath("rabbitmq").AtMapKey("dead_letter"), knownString("orders.dlq")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "type", "rabbitmq"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.url_secret", "mq/url"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.queue", "orders"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.passive", "false"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.prefetch", "5"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.max_retries", "2"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.retry_backoff_ms", "1000"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.dead_letter", "orders.dlq"),
					resource.TestCheckResourceAttr(addr, "enabled", "true"),
					resource.TestCheckResourceAttr(addr, "connected", "false"),
					resource.TestCheckResourceAttr(addr, "delivered_total", "0"),
					resource.TestCheckResourceAttr(addr, "dead_lettered_total", "0"),
					resource.TestCheckResourceAttr(addr, "trigger_url", ""),
					resource.TestCheckNoResourceAttr("sless_trigger.web", "rabbitmq.%"),
					resource.TestCheckNoResourceAttr("sless_trigger.web", "connected"),
					resource.TestCheckNoResourceAttr("sless_trigger.web", "delivered_total"),
					rabbitmq(apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders", Prefetch: 5, MaxRetries: &two,
						RetryBackoffMS: apiv1.DefaultRetryBackoffMS, DeadLetter: "orders.dlq"}),
				),
			},
			{ // the consumer's status moved (it tried the broker): a refresh, not a diff
				Config:   config(true, "    prefetch    = 5\n    max_retries = 2"),
				PlanOnly: true,
			},
			{ // enabled changes in place
				Config: config(false, "    prefetch    = 5\n    max_retries = 2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonPath("rabbitmq").AtMapKey("dead_letter"), knownString("orders.dlq")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "enabled", "false"),
					resource.TestCheckResourceAttr(addr, "connected", "false"),
				),
			},
			{ // any other setting replaces the trigger; removing max_retries returns it to the default
				Config: config(false, "    prefetch         = 1\n    retry_backoff_ms = 50\n    passive          = true\n    dead_letter      = \"orders.failed\""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("sless_trigger.web", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "rabbitmq.max_retries", "5"),
					resource.TestCheckResourceAttr(addr, "rabbitmq.dead_letter", "orders.failed"),
					rabbitmq(apiv1.RabbitMQTrigger{URLSecret: "mq/url", Queue: "orders", Passive: true, Prefetch: 1, MaxRetries: &five,
						RetryBackoffMS: 50, DeadLetter: "orders.failed"}),
				),
			},
			{ // import by name: the block as the API answers it, defaults included
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     "tf-orders-mq",
				ImportStateVerify: true,
				// The consumer's status moves on its own (a retried connection, its last error).
				ImportStateVerifyIgnore: []string{"last_error", "in_flight", "connected"},
			},
		},
	})
}

// postEvent invokes the function asynchronously through /fn/ and returns the status and body.
func postEvent(t *testing.T, u *testenv.SlessUp, name, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u.URL+"/fn/"+u.Client.Namespace()+"/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// asyncAnswers checks how /fn/ answers an asynchronous invocation: 202 when async is on, 400 off.
func asyncAnswers(t *testing.T, u *testenv.SlessUp, name string, want int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if code, body := postEvent(t, u, name, `{"n": 1}`); code != want {
			return fmt.Errorf("/fn/ with %s: %s answered %d %s, want %d", apiv1.HeaderInvocationType, apiv1.InvocationTypeEvent, code, body, want)
		}
		return nil
	}
}

// sless_function's async block on a real sless up: the defaults planned and read back, every
// change in place (a PUT of the function, never a replace), enabled = false and a removed block
// both turning it off, the data source mirroring it, and import.
func TestAccFunctionAsync(t *testing.T) {
	u := acc(t)
	src := filepath.Join(t.TempDir(), "code")
	writeCode(t, src, "def handle(event):\n    return {'ok': True}\n")
	config := func(async string) string {
		return providerBlock(u) + fmt.Sprintf(`
resource "sless_function" "f" {
  name       = "tf-async"
  runtime    = "python3.11"
  source_dir = %q
%s
}
data "sless_function" "f" {
  name       = sless_function.f.name
  depends_on = [sless_function.f]
}
`, src, async)
	}
	const addr = "sless_function.f"
	platform := func(want *apiv1.AsyncConfig) resource.TestCheckFunc {
		return func(*terraform.State) error {
			f, err := u.Client.GetFunction(context.Background(), "tf-async")
			if err != nil {
				return err
			}
			switch got := f.Async; {
			case want == nil && got != nil && got.Enabled:
				return fmt.Errorf("the platform has async %+v, want it off", *got)
			case want != nil && (got == nil || got.Enabled != want.Enabled || *got.MaxRetries != *want.MaxRetries || got.MaxAgeSec != want.MaxAgeSec || got.MaxQueued != want.MaxQueued):
				return fmt.Errorf("the platform has async %+v, want %+v", got, *want)
			}
			return nil
		}
	}
	inPlace := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)}}
	zero, two := 0, 2
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{ // create with async on: the defaults are planned and read back
				Config: config("  async = { enabled = true }"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue(addr, tfjsonPath("async").AtMapKey("max_queued"), knownInt(apiv1.DefaultAsyncMaxQueued)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "phase", "Ready"),
					resource.TestCheckResourceAttr(addr, "async.enabled", "true"),
					resource.TestCheckResourceAttr(addr, "async.max_retries", "2"),
					resource.TestCheckResourceAttr(addr, "async.max_age_sec", "21600"),
					resource.TestCheckResourceAttr(addr, "async.max_queued", "10000"),
					resource.TestCheckResourceAttr("data.sless_function.f", "async.enabled", "true"),
					resource.TestCheckResourceAttr("data.sless_function.f", "async.max_queued", "10000"),
					platform(&apiv1.AsyncConfig{Enabled: true, MaxRetries: &two, MaxAgeSec: apiv1.DefaultAsyncMaxAgeSec, MaxQueued: apiv1.DefaultAsyncMaxQueued}),
					asyncAnswers(t, u, "tf-async", http.StatusAccepted),
				),
			},
			{ // settings change in place
				Config:           config("  async = {\n    enabled     = true\n    max_retries = 0\n    max_age_sec = 60\n    max_queued  = 5\n  }"),
				ConfigPlanChecks: inPlace,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "phase", "Ready"),
					resource.TestCheckResourceAttr(addr, "async.max_retries", "0"),
					resource.TestCheckResourceAttr("data.sless_function.f", "async.max_age_sec", "60"),
					platform(&apiv1.AsyncConfig{Enabled: true, MaxRetries: &zero, MaxAgeSec: 60, MaxQueued: 5}),
					asyncAnswers(t, u, "tf-async", http.StatusAccepted),
				),
			},
			{ // enabled = false: off, in place (the other settings back to their defaults)
				Config:           config("  async = { enabled = false }"),
				ConfigPlanChecks: inPlace,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "async.enabled", "false"),
					resource.TestCheckResourceAttr(addr, "async.max_retries", "2"),
					platform(nil),
					asyncAnswers(t, u, "tf-async", http.StatusBadRequest),
				),
			},
			{ // on again, then the block removed: off, in place
				Config:           config("  async = { enabled = true }"),
				ConfigPlanChecks: inPlace,
				Check:            asyncAnswers(t, u, "tf-async", http.StatusAccepted),
			},
			{
				Config:           config(""),
				ConfigPlanChecks: inPlace,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckNoResourceAttr(addr, "async.%"),
					resource.TestCheckNoResourceAttr("data.sless_function.f", "async.%"),
					platform(nil),
					asyncAnswers(t, u, "tf-async", http.StatusBadRequest),
				),
			},
			{ // on once more, and imported with it
				Config:           config("  async = {\n    enabled    = true\n    max_queued = 100\n  }"),
				ConfigPlanChecks: inPlace,
				Check:            platform(&apiv1.AsyncConfig{Enabled: true, MaxRetries: &two, MaxAgeSec: apiv1.DefaultAsyncMaxAgeSec, MaxQueued: 100}),
			},
			{
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           "tf-async",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source_dir", "build_timeout_sec"},
			},
		},
	})
}

// Bad rabbitmq and async settings are refused by terraform plan with a message naming the fault,
// and nothing is created.
func TestAccBadEventConfig(t *testing.T) {
	u := acc(t)
	src := t.TempDir()
	writeCode(t, src, "def handle(e):\n    return 1\n")
	trigger := func(typ, extra string) string {
		return fmt.Sprintf(`resource "sless_trigger" "t" {
  name         = "t"
  function_ref = "x"
  type         = %q
%s
}`, typ, extra)
	}
	mq := func(settings string) string {
		return trigger("rabbitmq", "  rabbitmq = {\n    url_secret = \"mq/url\"\n    queue = \"orders\"\n"+settings+"\n  }")
	}
	function := func(async string) string {
		return `resource "sless_function" "f" {
  name = "x"
  runtime = "python3.11"
  source_dir = "` + src + `"
  async = ` + async + `
}`
	}
	for _, tc := range []struct{ name, hcl, want string }{
		{"rabbitmq without its block", trigger("rabbitmq", ""), `(?s)Missing rabbitmq block.*needs\s+rabbitmq\s+=`},
		{"rabbitmq block on an http trigger", trigger("http", "  rabbitmq = {\n    url_secret = \"mq/url\"\n    queue = \"orders\"\n  }"),
			`(?s)only\s+a\s+rabbitmq\s+trigger\s+has\s+a\s+rabbitmq\s+block\s+\(type\s+is\s+"http"\)`},
		{"rabbitmq block on a cron trigger", trigger("cron", "  schedule = \"0 9 * * *\"\n  rabbitmq = {\n    url_secret = \"mq/url\"\n    queue = \"orders\"\n  }"),
			`(?s)only\s+a\s+rabbitmq\s+trigger\s+has\s+a\s+rabbitmq\s+block\s+\(type\s+is\s+"cron"\)`},
		{"schedule on a rabbitmq trigger", trigger("rabbitmq", "  schedule = \"0 9 * * *\"\n  rabbitmq = {\n    url_secret = \"mq/url\"\n    queue = \"orders\"\n  }"),
			`(?s)only\s+a\s+cron\s+trigger\s+has\s+a\s+schedule`},
		{"cron without schedule", trigger("cron", ""), `(?s)Missing schedule.*needs\s+a\s+schedule`},
		{"rabbitmq without url_secret", trigger("rabbitmq", "  rabbitmq = { queue = \"orders\" }"), `(?s)attribute\s+"url_secret"\s+is\s+required`},
		{"rabbitmq without queue", trigger("rabbitmq", "  rabbitmq = { url_secret = \"mq/url\" }"), `(?s)attribute\s+"queue"\s+is\s+required`},
		{"url_secret not secret/key", trigger("rabbitmq", "  rabbitmq = {\n    url_secret = \"mqurl\"\n    queue = \"orders\"\n  }"),
			`(?s)rabbitmq.url_secret:\s+secret\s+reference\s+"mqurl"\s+must\s+be\s+SECRET/KEY`},
		{"url_secret an inline URL", trigger("rabbitmq", "  rabbitmq = {\n    url_secret = \"amqp://u:p@broker:5672/\"\n    queue = \"orders\"\n  }"),
			`(?s)must\s+be\s+"secret/key".*not\s+the\s+URL\s+itself`},
		{"empty queue", trigger("rabbitmq", "  rabbitmq = {\n    url_secret = \"mq/url\"\n    queue = \"\"\n  }"), `(?s)rabbitmq.queue.*length\s+must\s+be\s+between\s+1\s+and\s+255`},
		{"prefetch 0", mq("    prefetch = 0"), `(?s)rabbitmq.prefetch.*between\s+1\s+and\s+1000,\s+got:\s+0`},
		{"prefetch 1001", mq("    prefetch = 1001"), `(?s)rabbitmq.prefetch.*between\s+1\s+and\s+1000,\s+got:\s+1001`},
		{"max_retries -1", mq("    max_retries = -1"), `(?s)rabbitmq.max_retries.*between\s+0\s+and\s+100,\s+got:\s+-1`},
		{"max_retries 101", mq("    max_retries = 101"), `(?s)rabbitmq.max_retries.*between\s+0\s+and\s+100,\s+got:\s+101`},
		{"retry_backoff_ms 0", mq("    retry_backoff_ms = 0"), `(?s)rabbitmq.retry_backoff_ms.*between\s+1\s+and\s+3600000,\s+got:\s+0`},
		{"async without enabled", function("{ max_retries = 1 }"), `(?s)attribute\s+"enabled"\s+is\s+required`},
		{"async max_retries 11", function("{\n    enabled = true\n    max_retries = 11\n  }"), `(?s)async.max_retries.*between\s+0\s+and\s+10,\s+got:\s+11`},
		{"async max_age_sec 59", function("{\n    enabled = true\n    max_age_sec = 59\n  }"), `(?s)async.max_age_sec.*between\s+60\s+and\s+21600,\s+got:\s+59`},
		{"async max_age_sec 21601", function("{\n    enabled = true\n    max_age_sec = 21601\n  }"), `(?s)async.max_age_sec.*between\s+60\s+and\s+21600,\s+got:\s+21601`},
		{"async max_queued 0", function("{\n    enabled = true\n    max_queued = 0\n  }"), `(?s)async.max_queued.*between\s+1\s+and\s+100000,\s+got:\s+0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      providerBlock(u) + tc.hcl,
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
	if fs, _ := u.Client.ListFunctions(context.Background()); len(fs) != 0 {
		t.Errorf("bad configurations created functions %v", fs)
	}
	if ts, _ := u.Client.ListTriggers(context.Background()); len(ts) != 0 {
		t.Errorf("bad configurations created triggers %v", ts)
	}
}
