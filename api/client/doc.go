// Package client is the typed Go client of the sless REST API, used by the CLI and the Terraform
// provider. Failures come back as *apiv1.Error (errors.As), parsed from the API's error envelope.
package client
