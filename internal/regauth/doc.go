// Package regauth owns who may do what in the registry sless runs (Distribution's token
// authentication, with sless as the token issuer): the keys (a token-signing key and a secret
// passwords are derived from), the identities — the platform, a node, a tenant's pull-only
// credential, a dependency layer's key-scoped push credential — and the issuer's HTTP handler that
// trades basic credentials for short-lived JWTs carrying per-repository actions.
//
// Passwords are HMACs of the user name under the secret, so anyone holding the keys (the registry,
// `sless up`, the operator) mints the same credential without a user database; a deps push
// credential carries its expiry in its name.
package regauth
