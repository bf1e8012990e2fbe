// Package auth verifies the API's bearer tokens: JWTs checked with golang-jwt v5 against keys from a
// JWKS URL, a PEM public key or an HS256 secret (single-host dev mode). Only the algorithms of the
// configured key are accepted, exp is required, iss/aud are checked when configured, and the
// caller's namespace follows from the verified subject (apiv1.NamespaceFor).
package auth
