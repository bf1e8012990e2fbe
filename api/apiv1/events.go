package apiv1

// Headers of /fn/ that the platform sets. A public request's X-Sless-Event-* headers are dropped
// at /fn/ (only the platform's event sources send them), and X-Sless-Error is dropped from a
// function's answers (only /fn/ sets it), so a handler and a caller can rely on both.
const (
	// HeaderError is on /fn/'s own error answers (429 throttled, 503 not ready, 413 too large,
	// 404…), with the error's code: an event source tells them from the function's own.
	HeaderError = "X-Sless-Error"
	// HeaderEventPrefix starts every header an event source adds to the request it sends.
	HeaderEventPrefix = "X-Sless-Event-"
	// HeaderEventSource names the source ("rabbitmq"); HeaderEventTrigger its trigger.
	HeaderEventSource  = HeaderEventPrefix + "Source"
	HeaderEventTrigger = HeaderEventPrefix + "Trigger"
	// A message's properties: its id (the idempotency key a handler de-duplicates on), correlation
	// id, exchange and routing key, whether the broker delivered it before, the delivery count
	// (attempts, from 1), and its headers as a JSON object.
	HeaderEventMessageID     = HeaderEventPrefix + "Message-Id"
	HeaderEventCorrelationID = HeaderEventPrefix + "Correlation-Id"
	HeaderEventExchange      = HeaderEventPrefix + "Exchange"
	HeaderEventRoutingKey    = HeaderEventPrefix + "Routing-Key"
	HeaderEventRedelivered   = HeaderEventPrefix + "Redelivered"
	HeaderEventDeliveryCount = HeaderEventPrefix + "Delivery-Count"
	HeaderEventHeaders       = HeaderEventPrefix + "Headers"
)

// SourceRabbitMQ is the event source of a rabbitmq trigger (Invocation.Source).
const SourceRabbitMQ = "rabbitmq"
