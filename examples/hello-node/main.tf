# A Node.js function on /fn/{namespace}/hello-node, as in the seed's example.
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

resource "sless_function" "hello_http" {
  name        = "hello-node"
  runtime     = "nodejs22"
  source_dir  = "${path.module}/code"
  memory_mb   = 128
  timeout_sec = 30
  env_vars = {
    "NODE_ENV" = "production"
  }
}

resource "sless_trigger" "hello_http" {
  name         = "hello-node-trigger"
  function_ref = sless_function.hello_http.name
  type         = "http"
  enabled      = true
}

output "trigger_url" {
  value = sless_trigger.hello_http.trigger_url
}
