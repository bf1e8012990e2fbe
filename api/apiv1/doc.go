// Package apiv1 is the wire format of the sless REST API (DESIGN.md §5): the JSON types the server,
// the CLI, the Terraform provider and outside tests exchange, and the one error envelope. Fields are
// added, never renamed. Standard library only.
package apiv1
