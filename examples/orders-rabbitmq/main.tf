# A function fed by a RabbitMQ queue: every message of "orders" is a POST to the function,
# acknowledged after a 2xx, retried with backoff after a failure, then dead-lettered to
# "orders.dlq". The same function also takes asynchronous invocations (sless invoke --async).
# Endpoint and token come from SLESS_ENDPOINT and SLESS_API_TOKEN (see examples/README.md); the
# broker's URL from TF_VAR_broker_url (see README.md here).
terraform {
  required_providers {
    sless = {
      source = "terra.k8c.ru/naeel/sless"
    }
  }
}

provider "sless" {}

variable "broker_url" {
  type        = string
  sensitive   = true
  description = "The broker's amqp:// (or amqps://) URL with its credentials, e.g. amqp://orders:PASSWORD@broker.example:5672/. Set TF_VAR_broker_url; never write it in a file."
}

# The URL with its credentials lives in a namespace secret; the trigger names its key and the
# platform reads it when it connects. Write-only: the API never answers the value (the state file
# still holds it, so keep the state private).
resource "sless_secret" "mq" {
  name = "orders-mq"
  data = {
    url = var.broker_url
  }
}

resource "sless_function" "orders" {
  name        = "orders"
  runtime     = "python3.11"
  source_dir  = "${path.module}/code"
  timeout_sec = 30

  # Also invocable asynchronously: `sless invoke orders --async -d '{"order_id": …}'` is stored
  # and answered 202 at once; the platform calls the function, retrying a failure twice, and
  # keeps what still fails in `sless dead-letters ls orders`. Changed in place; removing the
  # block turns it off.
  async = {
    enabled     = true
    max_retries = 2
  }
}

resource "sless_trigger" "orders" {
  name         = "orders"
  function_ref = sless_function.orders.name
  type         = "rabbitmq"
  rabbitmq = {
    url_secret       = "${sless_secret.mq.name}/url"
    queue            = "orders"     # declared durable (passive = true: it must exist)
    prefetch         = 10           # messages in flight at most; 1 keeps them in order
    max_retries      = 5            # a 5xx, a timeout or a lost instance: tried again up to 5 times,
    retry_backoff_ms = 1000         # 1 s apart, doubling,
    dead_letter      = "orders.dlq" # then published here (a 4xx of the function: at once)
  }
}

output "url" {
  value = sless_function.orders.url
}

output "queue" {
  value = sless_trigger.orders.rabbitmq.queue
}

output "dead_letter" {
  value = sless_trigger.orders.rabbitmq.dead_letter
}
