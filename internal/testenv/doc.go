// Package testenv gives tests the real components they run against — a CNCF Distribution registry
// (with or without token auth), MinIO, PostgreSQL, RabbitMQ (a private node), podman, a `sless up`
// process and the Terraform provider built from this tree, local pip and npm indexes, a server
// "outside" in another network namespace, the tool binaries hack/ builds (Tool) — and one rule for
// when a component is missing: skip loudly, or fail when SLESS_REQUIRE_REAL=1 (as `make test` sets).
package testenv
