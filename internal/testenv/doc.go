// Package testenv gives tests the real components they run against (a CNCF Distribution registry,
// tool binaries built by hack/) and one rule for when a component is missing: skip loudly, or fail
// when SLESS_REQUIRE_REAL=1 (as `make test` sets).
package testenv
