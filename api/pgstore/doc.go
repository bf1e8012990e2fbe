// Package pgstore owns the invocation history of /fn/ in PostgreSQL (the Kubernetes backend's
// objects.Invocations): the schema and its migrations (embedded .sql files applied by goose at
// start), the buffered writer that keeps the database off /fn/'s path (a bounded buffer flushed
// with COPY; what does not fit is dropped and counted), paged reads, retention, and the metrics
// that account for every record. PostgreSQL may be away at any time: the store starts without it,
// keeps recording into its buffer, and answers reads with *objects.NotReadyError until it is back.
package pgstore
