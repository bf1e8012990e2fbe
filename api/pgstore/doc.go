// Package pgstore owns what the Kubernetes backend keeps in PostgreSQL: the invocation history of
// /fn/ (objects.Invocations) and the queue of asynchronous invocations (objects.AsyncQueue), both on
// one pool and one schema, whose migrations (embedded .sql files) goose applies at start. The
// history has a buffered writer that keeps the database off /fn/'s path (a bounded buffer flushed
// with COPY; what does not fit is dropped and counted), paged reads, retention, and the metrics that
// account for every record. The queue (AsyncQueue) is shared by every API replica: claims take due
// rows with FOR UPDATE SKIP LOCKED under leases, and a function's advisory lock keeps its depth
// quota between replicas. PostgreSQL may be away at any time: the store starts without it, keeps
// recording into its buffer, and answers reads and every call of the queue with
// *objects.NotReadyError (within the query timeout) until it is back.
package pgstore
