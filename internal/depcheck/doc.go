// Package depcheck keeps the layering of DESIGN.md §2 honest: every package of the module has a
// rule saying which of the module's packages it may import, and the core packages may not reach
// Kubernetes at all. A package without a rule fails the test: add one.
package depcheck
