// Package provider is the Terraform provider for sless (terraform-plugin-framework): the resources
// sless_function, sless_trigger and sless_job and the data source sless_function, with the seed
// system's attribute names so its configurations keep working. It talks to the platform only
// through api/client.
package provider
