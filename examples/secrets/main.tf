# A function that takes a secret as an environment variable and another as files.
# Endpoint and token come from SLESS_ENDPOINT and SLESS_API_TOKEN (see examples/README.md).
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

variable "api_token" {
  type      = string
  sensitive = true
  default   = "example-token-0123456789" # in real use: TF_VAR_api_token, never in the file
}

# Write-only: the API answers the keys and a version, never a value. Plans show
# "(sensitive value)"; the state file still holds the values, so keep it private.
resource "sless_secret" "api" {
  name = "api"
  data = {
    token = var.api_token
  }
}

resource "sless_secret" "tls" {
  name = "tls"
  data = {
    cert = "-----BEGIN CERTIFICATE-----\nexample\n-----END CERTIFICATE-----\n"
  }
}

resource "sless_function" "client" {
  name       = "secrets-client"
  runtime    = "python3.11"
  source_dir = "${path.module}/code"
  # Refer to the secrets through their resources, so Terraform writes them first.
  secret_env = {
    API_TOKEN = "${sless_secret.api.name}/token"
  }
  secret_files = {
    "/var/run/secrets/tls" = sless_secret.tls.name # one read-only file per key: /var/run/secrets/tls/cert
  }
}

output "url" {
  value = sless_function.client.url
}

output "api_secret_version" {
  value = sless_secret.api.version
}
