// Package rabbitmq owns the consumer of a RabbitMQ trigger (issue 30): one connection to the
// tenant's broker, the queue and its dead-letter queue declared, at most prefetch messages in
// flight, each handed to an Invoker (the backend's path to /fn/) and acknowledged only after a
// 2xx; what else becomes of a message is delivery.Policy's rule. It survives lost connections and
// broker restarts by reconnecting with backoff and never acknowledges what was not answered 2xx
// or safely dead-lettered. The broker's address is checked after DNS resolution on every
// connection (Config.CheckAddr), so a tenant cannot point the platform at its own services.
package rabbitmq
