package provider_test

import (
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func tfjsonPath(attr string) tfjsonpath.Path { return tfjsonpath.New(attr) }

func knownString(s string) knownvalue.Check { return knownvalue.StringExact(s) }

func knownInt(n int64) knownvalue.Check { return knownvalue.Int64Exact(n) }
