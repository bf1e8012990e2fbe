// Package delivery owns what happens to one event — a message from a RabbitMQ trigger or an
// asynchronous invocation — after each attempt to hand it to its function: acknowledge it, try
// again after a backoff, or move it to the dead letters. Both event sources use this one core, so
// they agree on what is retried, what counts as an attempt and when an event is given up (issue
// 30). Its rule is pure (the callers own the clock, the broker and the store); Metrics counts what
// it decided.
package delivery
