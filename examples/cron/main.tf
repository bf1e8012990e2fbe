# A function run on a schedule: every day at 09:00 it is called in job mode with
# {"source":"cron","trigger":"daily-report","scheduled_time":"…"}.
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

resource "sless_function" "report" {
  name       = "daily-report"
  runtime    = "python3.11"
  source_dir = "${path.module}/code"
}

resource "sless_trigger" "daily" {
  name         = "daily-report"
  function_ref = sless_function.report.name
  type         = "cron"
  schedule     = "0 9 * * *"
}

output "schedule" {
  value = sless_trigger.daily.schedule
}
