// Package faultproxy is a reverse proxy for tests that inject faults: in front of a server (a
// registry, S3, an API), it forwards every request until told to fail, then answers the requests
// it matches with a chosen status instead (e.g. 503 to pushes: PUT, POST, PATCH), counting and
// recording what it refused, until healed or for a set time (FailFor). The Host header is kept,
// so servers that build absolute URLs from it (a registry's upload Locations) keep sending
// clients through the proxy.
package faultproxy
