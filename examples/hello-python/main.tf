# A Python function on /fn/{namespace}/hello-python.
# Endpoint and token come from SLESS_ENDPOINT and SLESS_API_TOKEN (see examples/README.md).
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

resource "sless_function" "hello" {
  name       = "hello-python"
  runtime    = "python3.11"
  source_dir = "${path.module}/code"
  memory_mb  = 128
  timeout_sec = 30
  env_vars = {
    GREETING = "hello"
  }
  # scale (optional, changed in place): at most 3 instances, 20 requests at once each
  max_replicas = 3
  concurrency  = 20
}

resource "sless_trigger" "http" {
  name         = "hello-python-http"
  function_ref = sless_function.hello.name
  type         = "http"
  enabled      = true
}

output "url" {
  value = sless_trigger.http.trigger_url
}

output "image" {
  value = sless_function.hello.image
}
