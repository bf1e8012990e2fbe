// Command testsum reads `go test -json` on stdin, prints the usual test output, and ends with one
// line "N passed, N failed, N skipped" (tests and subtests). It exits 1 if anything failed or the
// build broke, so `make test` keeps go test's verdict.
package main
