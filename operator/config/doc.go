// Package config holds the operator's install manifests (kustomize: the CRDs and RBAC role
// generated from the markers, the manager Deployment, the default overlay) and the test that checks
// them against the binary they configure.
package config
