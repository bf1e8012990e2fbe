// Package depcheck keeps the layering of DESIGN.md §2 honest: every package of the module has a
// rule saying which of the module's packages it may import, and the core packages may not reach
// Kubernetes at all. A package without a rule fails the test: add one. It also keeps files short:
// a hand-written non-test Go file of more than 700 lines fails (TestNoLongFiles), to be split by
// responsibility into files of its package.
package depcheck
