// Package asynctest owns the contract every objects.AsyncQueue passes (async.MemQueue, local/state's
// bbolt queue, api/pgstore's PostgreSQL queue): Run, from each store's tests, and Event, the
// queued event those tests enqueue.
package asynctest
