# The seed's one-shot job: the function sums event.input; job_message is its result.
# Raise run_id to run it again.
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

resource "sless_function" "sum" {
  name       = "sum"
  runtime    = "nodejs22"
  source_dir = "${path.module}/code"
}

resource "sless_job" "hello_run" {
  name         = "hello-run"
  function_ref = sless_function.sum.name
  run_id       = 1
  event_json   = jsonencode({ "input" : [100, 200, 300] })
}

output "job_result" {
  value = sless_job.hello_run.job_message
}
