# A provided-runtime function (bring your own binary) on /fn/{namespace}/hello-go: the Go server in
# src/, built as code/bootstrap before apply:
#   (cd src && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o ../code/bootstrap .)
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
  name        = "hello-go"
  runtime     = "provided"
  source_dir  = "${path.module}/code" # must hold an executable `bootstrap` at its root
  memory_mb   = 64
  timeout_sec = 30
  env_vars = {
    GREETING = "hello from go"
  }
}

resource "sless_trigger" "http" {
  name         = "hello-go-http"
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
