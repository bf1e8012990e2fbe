// Command terraform-provider-sless is the sless Terraform provider, served at the seed's source
// address terra.k8c.ru/naeel/sless.
package main
