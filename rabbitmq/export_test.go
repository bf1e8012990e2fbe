package rabbitmq

// Redact is redact, for the tests.
var Redact = redact
