// Package async is asynchronous invocation: the dispatcher that takes events from an
// objects.AsyncQueue and hands each to its function through /fn/ in this process (the activator's
// path) with delivery's retry and dead-letter rule, the queue's metrics, and MemQueue, the queue in
// memory (the unit tests', and the single host's index over bbolt). The durable queues are
// local/state's (bbolt) and api/pgstore's (PostgreSQL, FOR UPDATE SKIP LOCKED); asynctest is the
// contract every queue passes.
package async
